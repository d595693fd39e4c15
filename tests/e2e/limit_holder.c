/* Takes everything the daemon allows one user, through the C API, and holds
 * it until its standard input ends: sessions until rdp_open is refused,
 * arenas until rdp_alloc is, registrations until RDP_ERR_NO_BUFFERS, and
 * connection ends (connect and accept inside the daemon) until
 * RDP_ERR_LIMIT. For each it prints one line,
 *
 *   limit sessions held 3 refused -14 --max_sessions_per_user reached: ...
 *
 * (what it holds -- sessions, registrations, arena MiB, connection ends --,
 * the refusal's status and rdp_last_error()), then
 * "holding" once all are held. A limit that is never hit within a bound,
 * or a call that fails otherwise, ends it with status 1.
 *
 *   limit_holder SOCKET SERVICE
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "api/rdmaplane.h"

enum { kMaxSessions = 64, kBound = 256 };

static void Limit(const char* what, int held, int status) {
  printf("limit %s held %d refused %d %s\n", what, held, status,
         rdp_last_error());
  fflush(stdout);
}

static int Fail(const char* what, int status) {
  printf("error %s %d %s\n", what, status, rdp_last_error());
  fflush(stdout);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SOCKET SERVICE\n", argv[0]);
    return 2;
  }
  const char* socket_path = argv[1];
  const char* service = argv[2];
  rdp_client* sessions[kMaxSessions];
  int n = 0;
  int status = RDP_OK;
  while (n < kMaxSessions &&
         (status = rdp_open(socket_path, &sessions[n])) == RDP_OK) {
    ++n;
  }
  if (status != RDP_ERR_LIMIT || n < 2) return Fail("open", status);
  Limit("sessions", n, status);

  /* Registrations, in memory of the second session. */
  uint8_t* buf = rdp_alloc(sessions[1], 1u << 20);
  if (buf == NULL) return Fail("alloc for registrations", RDP_ERR_LIMIT);
  int keys = 0;
  uint32_t lkey = 0;
  while (keys < kBound &&
         (status = rdp_register_memory(sessions[1], buf + 4096 * keys, 4096,
                                       RDP_MEM_READ, &lkey)) == RDP_OK) {
    ++keys;
  }
  if (status != RDP_ERR_NO_BUFFERS) return Fail("register", status);
  Limit("registrations", keys, status);

  /* Arenas: 32 MiB at a time in the first session (the second holds one
   * already, for the registrations), until one more arena is refused. */
  int pieces = 0;
  while (pieces < kBound && rdp_alloc(sessions[0], 32u << 20) != NULL) {
    ++pieces;
  }
  if (pieces == kBound) return Fail("alloc", RDP_OK);
  Limit("arena-MiB", pieces * 32, RDP_ERR_LIMIT);

  /* Connection ends: session 1 listens, session 0 connects, 1 accepts. */
  status = rdp_listen(sessions[1], service);
  if (status != RDP_OK) return Fail("listen", status);
  int ends = 0;
  while (ends < kBound) {
    rdp_conn conn;
    status = rdp_connect(sessions[0], service, &conn);
    if (status != RDP_OK) break;
    ++ends;
    status = rdp_accept(sessions[1], service, 5000, &conn);
    if (status != RDP_OK) break;
    ++ends;
  }
  if (status != RDP_ERR_LIMIT) return Fail("connect or accept", status);
  Limit("connections", ends, status);

  printf("holding\n");
  fflush(stdout);
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  for (int i = 0; i < n; ++i) rdp_close(sessions[i]);
  return 0;
}
