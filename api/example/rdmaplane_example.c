/* rdmaplane_example: the C API of librdmaplane from start to finish.
 *
 *   rdmaplane_example [SOCKET]
 *
 * SOCKET is the daemon's Unix socket (default: the library's default path,
 * see docs/api.md). One process plays both ends of a connection:
 *
 *   server: opens a session, listens on a service, accepts, allocates arena
 *           memory and registers it for RDMA by its peer. It would then send
 *           the buffer's address and the opaque descriptor to the client out
 *           of band (here: a struct copied in memory).
 *   client: opens a session, connects to the service, allocates and registers
 *           local memory, RDMA-WRITEs into the server's buffer, RDMA-READs it
 *           back, and shows two requests the library refuses.
 *
 * Every call's status is checked; on any failure the program names the call
 * and the status (rdp_status_name) on stderr and exits with 1. On success
 * the last line it prints is "example: ok".
 *
 * Outside this tree, against an installed rdmaplane (deploy/install.sh):
 *
 *   cc -std=c11 rdmaplane_example.c $(pkg-config --cflags --libs rdmaplane)
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdmaplane.h>

enum { kBytes = 64 * 1024 };

/* What the server tells the client about its buffer. A real program sends
 * this over its own channel (a TCP socket, a file, a config service);
 * rdmaplane does not carry it. */
struct buffer_offer {
  uint64_t address; /* the server's virtual address of the buffer */
  uint32_t length;
  uint32_t descriptor_length;
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES]; /* opaque bytes */
};

/* Runs `call`; unless it returns `expected`, reports and jumps to cleanup. */
#define EXPECT_STATUS(what, expected, call)                                \
  do {                                                                     \
    const int got_ = (call);                                               \
    if (got_ != (expected)) {                                              \
      fprintf(stderr, "example: FAILED: %s: %s (%d), expected %s\n", what, \
              rdp_status_name(got_), got_, rdp_status_name(expected));     \
      goto out;                                                            \
    }                                                                      \
  } while (0)

#define EXPECT_TRUE(what, cond)                       \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "example: FAILED: %s\n", what); \
      goto out;                                       \
    }                                                 \
  } while (0)

int main(int argc, char** argv) {
  const char* socket_path = argc > 1 ? argv[1] : NULL;
  int exit_code = 1;
  rdp_client* server = NULL;
  rdp_client* client = NULL;
  rdp_conn server_conn = 0, client_conn = 0;
  int server_connected = 0, client_connected = 0;
  uint8_t* target = NULL; /* server memory the client writes and reads */
  uint8_t* source = NULL; /* client memory written from */
  uint8_t* back = NULL;   /* client memory read into */
  uint8_t* descriptor = NULL;
  uint32_t descriptor_length = 0;
  int rdma_registered = 0;
  uint32_t source_key = 0, back_key = 0;
  int source_registered = 0, back_registered = 0;
  struct buffer_offer offer;
  char service[64];
  uint32_t bytes = 0;
  uint32_t i;

  /* 1. Sessions. Each rdp_open is one session with the daemon. */
  int status = rdp_open(socket_path, &server);
  if (status != RDP_OK) {
    fprintf(stderr,
            "example: FAILED: cannot open a session with rdmaplaned at %s: "
            "%s\n",
            socket_path != NULL ? socket_path : "(the default socket)",
            rdp_status_name(status));
    return 1;
  }
  EXPECT_STATUS("rdp_open (client)", RDP_OK, rdp_open(socket_path, &client));

  /* 2. A connection by service name: listen, connect, then accept. */
  snprintf(service, sizeof(service), "rdmaplane-example-%ld", (long)getpid());
  EXPECT_STATUS("rdp_listen", RDP_OK, rdp_listen(server, service));
  EXPECT_STATUS("rdp_connect", RDP_OK,
                rdp_connect(client, service, &client_conn));
  client_connected = 1;
  EXPECT_STATUS("rdp_accept", RDP_OK,
                rdp_accept(server, service, 5000, &server_conn));
  server_connected = 1;
  printf("example: connected on service \"%s\"\n", service);

  /* 3. Arena memory: only memory from rdp_alloc can be registered. */
  target = rdp_alloc(server, kBytes);
  source = rdp_alloc(client, kBytes);
  back = rdp_alloc(client, kBytes);
  EXPECT_TRUE("rdp_alloc returned NULL",
              target != NULL && source != NULL && back != NULL);
  memset(target, 0, kBytes);
  memset(back, 0, kBytes);
  for (i = 0; i < kBytes; ++i) source[i] = (uint8_t)(i * 7 + 3);

  /* 4. Server: register the buffer for RDMA by the peer. The descriptor's
   * size is asked for first: a too-small buffer (here: none) gives
   * RDP_ERR_FAULT and the size needed in descriptor_length. */
  descriptor_length = 0;
  EXPECT_STATUS(
      "rdp_register_rdma_memory (size query)", RDP_ERR_FAULT,
      rdp_register_rdma_memory(server, server_conn, target, kBytes,
                               RDP_MEM_READWRITE, NULL, &descriptor_length));
  EXPECT_TRUE("no descriptor size reported", descriptor_length > 0);
  printf("example: the descriptor needs %u bytes\n",
         (unsigned)descriptor_length);
  descriptor = malloc(descriptor_length);
  EXPECT_TRUE("malloc failed", descriptor != NULL);
  EXPECT_STATUS("rdp_register_rdma_memory", RDP_OK,
                rdp_register_rdma_memory(server, server_conn, target, kBytes,
                                         RDP_MEM_READWRITE, descriptor,
                                         &descriptor_length));
  rdma_registered = 1;

  /* Out of band: the server tells the client where the buffer is. */
  EXPECT_TRUE("descriptor larger than the offer",
              descriptor_length <= sizeof(offer.descriptor));
  memset(&offer, 0, sizeof(offer));
  offer.address = (uint64_t)(uintptr_t)target;
  offer.length = kBytes;
  offer.descriptor_length = descriptor_length;
  memcpy(offer.descriptor, descriptor, descriptor_length);

  /* 5. Client: register local memory (the source of writes, the target of
   * reads). */
  EXPECT_STATUS(
      "rdp_register_memory (source)", RDP_OK,
      rdp_register_memory(client, source, kBytes, RDP_MEM_READ, &source_key));
  source_registered = 1;
  EXPECT_STATUS(
      "rdp_register_memory (back)", RDP_OK,
      rdp_register_memory(client, back, kBytes, RDP_MEM_WRITE, &back_key));
  back_registered = 1;

  /* 6. RDMA WRITE from a two-entry SGL built on the stack: the library
   * copies it before rdp_write returns. */
  {
    rdp_sge sgl[2];
    rdp_overlapped ov;
    memset(&ov, 0, sizeof(ov));
    ov.context = 1; /* ours; the library leaves it alone */
    sgl[0].addr = source;
    sgl[0].length = kBytes / 2;
    sgl[0].lkey = source_key;
    sgl[1].addr = source + kBytes / 2;
    sgl[1].length = kBytes / 2;
    sgl[1].lkey = source_key;
    EXPECT_STATUS("rdp_write", RDP_PENDING,
                  rdp_write(client, client_conn, sgl, 2, offer.descriptor,
                            offer.descriptor_length, 0, 0, &ov));
    EXPECT_STATUS(
        "rdp_get_overlapped_result (write)", RDP_OK,
        rdp_get_overlapped_result(client, client_conn, &ov, 1, &bytes));
    EXPECT_TRUE("write reported the wrong byte count", bytes == kBytes);
    EXPECT_TRUE("the server's buffer does not hold what was written",
                memcmp(target, source, kBytes) == 0);
    printf(
        "example: wrote %u bytes from 2 SGEs into the server's buffer: "
        "verified\n",
        (unsigned)bytes);
  }

  /* 7. RDMA READ back: the remote address is the server's address for the
   * buffer (plus an offset, if wanted); the token is its descriptor. */
  {
    rdp_sge sge;
    rdp_overlapped ov;
    memset(&ov, 0, sizeof(ov));
    ov.context = 2;
    sge.addr = back;
    sge.length = kBytes;
    sge.lkey = back_key;
    EXPECT_STATUS("rdp_read", RDP_PENDING,
                  rdp_read(client, client_conn, &sge, 1, offer.address,
                           offer.descriptor, offer.descriptor_length, 0, &ov));
    EXPECT_STATUS(
        "rdp_get_overlapped_result (read)", RDP_OK,
        rdp_get_overlapped_result(client, client_conn, &ov, 1, &bytes));
    EXPECT_TRUE("read reported the wrong byte count", bytes == kBytes);
    EXPECT_TRUE("the bytes read back differ from those written",
                memcmp(back, source, kBytes) == 0);
    printf("example: read %u bytes back: verified\n", (unsigned)bytes);
  }

  /* 8. Requests the library refuses at once (nothing is posted, the
   * connection stays usable): a write that would run past the end of the
   * registered buffer, and a read beyond it. */
  {
    rdp_sge sge;
    rdp_overlapped ov;
    rdp_overlapped* done[4];
    memset(&ov, 0, sizeof(ov));
    sge.addr = source;
    sge.length = 4096;
    sge.lkey = source_key;
    status = rdp_write(client, client_conn, &sge, 1, offer.descriptor,
                       offer.descriptor_length, kBytes - 16, 0, &ov);
    EXPECT_STATUS("rdp_write past the end", RDP_ERR_FAULT, status);
    printf("example: write past the end of the buffer: %s (as expected)\n",
           rdp_status_name(status));
    sge.addr = back;
    sge.lkey = back_key;
    status = rdp_read(client, client_conn, &sge, 1, offer.address + kBytes - 16,
                      offer.descriptor, offer.descriptor_length, 0, &ov);
    EXPECT_STATUS("rdp_read past the end", RDP_ERR_REMOTE_RESOURCES, status);
    printf("example: read past the end of the buffer: %s (as expected)\n",
           rdp_status_name(status));
    /* Nothing was posted, so nothing is left to complete. */
    status = rdp_poll(client, client_conn, done, 4);
    EXPECT_TRUE("rdp_poll found completions after refused requests",
                status == 0);
  }

  /* 9. Tear down in reverse order. */
  EXPECT_STATUS("rdp_deregister_rdma_memory", RDP_OK,
                rdp_deregister_rdma_memory(server, server_conn, descriptor,
                                           descriptor_length));
  rdma_registered = 0;
  EXPECT_STATUS("rdp_deregister_memory (source)", RDP_OK,
                rdp_deregister_memory(client, source_key));
  source_registered = 0;
  EXPECT_STATUS("rdp_deregister_memory (back)", RDP_OK,
                rdp_deregister_memory(client, back_key));
  back_registered = 0;
  EXPECT_STATUS("rdp_free (target)", RDP_OK, rdp_free(server, target));
  target = NULL;
  EXPECT_STATUS("rdp_free (source)", RDP_OK, rdp_free(client, source));
  source = NULL;
  EXPECT_STATUS("rdp_free (back)", RDP_OK, rdp_free(client, back));
  back = NULL;
  EXPECT_STATUS("rdp_disconnect (client)", RDP_OK,
                rdp_disconnect(client, client_conn));
  client_connected = 0;
  EXPECT_STATUS("rdp_disconnect (server)", RDP_OK,
                rdp_disconnect(server, server_conn));
  server_connected = 0;
  printf("example: deregistered, freed and disconnected\n");
  exit_code = 0;

out:
  /* On failure, release what is still held (rdp_close alone would do: it
   * aborts outstanding work and releases every registration and arena). */
  if (rdma_registered) {
    rdp_deregister_rdma_memory(server, server_conn, descriptor,
                               descriptor_length);
  }
  if (source_registered) rdp_deregister_memory(client, source_key);
  if (back_registered) rdp_deregister_memory(client, back_key);
  if (client_connected) rdp_disconnect(client, client_conn);
  if (server_connected) rdp_disconnect(server, server_conn);
  free(descriptor);
  if (client != NULL) rdp_close(client);
  if (server != NULL) rdp_close(server);
  if (exit_code == 0) printf("example: ok\n");
  return exit_code;
}
