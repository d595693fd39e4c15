/* Probes of the rdma_cm behaviour the man pages promise, through the
 * system's librdmacm, each ending in "cm_probe: ok" or in "cm_probe: FAIL"
 * with the reason:
 *
 *   cm_probe server ADDRESS PORT   serves the client's rounds below, then
 *                                  exits 0
 *   cm_probe client ADDRESS PORT   the rounds below
 *   cm_probe vanish ADDRESS PORT   listens, takes one connect request and
 *                                  exits without answering it
 *   cm_probe lost ADDRESS PORT     connects; expects REJECTED (the peer
 *                                  went away before it answered)
 *   cm_probe gone ADDRESS PORT     listens, accepts one request with a
 *                                  queue pair, and expects REJECTED (the
 *                                  client went away before its RTU)
 *   cm_probe leave ADDRESS PORT    connects with a queue pair of its own
 *                                  (not the id's) and exits at
 *                                  CONNECT_RESPONSE, without its RTU
 *   cm_probe anyserver 0.0.0.0 PORT COUNT
 *                                  in a process with several devices:
 *                                  listens on every device (0.0.0.0) and
 *                                  serves COUNT `reach` clients one after
 *                                  the other. Each request must arrive on
 *                                  the device whose address the client
 *                                  aimed at (its private data names it):
 *                                  the new id's device has that address
 *                                  (GID 0) and rdma_get_local_addr gives
 *                                  it. A message goes each way and the
 *                                  client disconnects. Prints one line per
 *                                  request: "request for A on DEVICE".
 *   cm_probe reach ADDRESS PORT [SOURCE]
 *                                  resolves ADDRESS (from the device of
 *                                  address SOURCE, bound first, if given),
 *                                  prints "resolved A on DEVICE from L",
 *                                  connects, a message each way,
 *                                  disconnects
 *
 * The client's rounds, against `server`:
 *   1. rdma_migrate_id: an id made on one event channel and moved to
 *      another reports its ADDR_RESOLVED and ROUTE_RESOLVED on the second;
 *      the first stays silent (poll) and is destroyed while the id lives.
 *   2. Private data: a connect with 57 bytes (RDMA_PS_TCP over IPv4 keeps 56
 *      of the REQ's 92 for the consumer) fails with EINVAL; one with 56 is
 *      delivered whole, and the server's REJECT carrying 148 bytes (its most;
 *      149 fails with EINVAL, as does an ACCEPT with 197) gives REJECTED
 *      with status 28 (consumer defined) and those 148 bytes.
 *   3. RDMA_PS_IB, on the same port number as the RDMA_PS_TCP listener
 *      (port spaces are apart): the connect reaches the server's PS_IB
 *      listener, whose ACCEPT carries 196 bytes (its most), seen whole by
 *      the client's ESTABLISHED; a message goes each way through the
 *      rdma_verbs.h helpers (rdma_reg_msgs, rdma_post_recv, rdma_post_send,
 *      rdma_get_send_comp, rdma_get_recv_comp); rdma_disconnect by the
 *      client gives DISCONNECTED on both sides.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define REQ_ROOM 56
#define REP_ROOM 196
#define REJ_ROOM 148
#define MSG_BYTES 64

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cm_probe: FAIL: ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cm_probe: ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  fflush(stdout);
}

static void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)(seed + i * 7);
}

static int same(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != (uint8_t)(seed + i * 7)) return 0;
  }
  return 1;
}

/* The next event on `ch`, which must be `want`; the event is acked after
 * copying what the caller needs (status, private data, id). */
struct seen {
  struct rdma_cm_id* id;
  struct rdma_cm_id* listen_id;
  int status;
  uint8_t data[256];
  uint8_t data_len;
};

static struct seen expect(struct rdma_event_channel* ch,
                          enum rdma_cm_event_type want) {
  struct rdma_cm_event* ev;
  if (rdma_get_cm_event(ch, &ev) != 0) {
    fail("rdma_get_cm_event waiting for %s: %s", rdma_event_str(want),
         strerror(errno));
  }
  struct seen s;
  memset(&s, 0, sizeof(s));
  s.id = ev->id;
  s.listen_id = ev->listen_id;
  s.status = ev->status;
  s.data_len = ev->param.conn.private_data_len;
  if (ev->param.conn.private_data != NULL) {
    memcpy(s.data, ev->param.conn.private_data, s.data_len);
  }
  const enum rdma_cm_event_type got = ev->event;
  rdma_ack_cm_event(ev);
  if (got != want) {
    fail("got %s (status %d), expected %s", rdma_event_str(got), s.status,
         rdma_event_str(want));
  }
  return s;
}

static struct sockaddr_in address(const char* ip, int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) fail("bad address %s", ip);
  return a;
}

static struct rdma_cm_id* listener(struct rdma_event_channel* ch,
                                   const char* ip, int port,
                                   enum rdma_port_space ps) {
  struct rdma_cm_id* id;
  struct sockaddr_in a = address(ip, port);
  if (rdma_create_id(ch, &id, NULL, ps) != 0) fail("rdma_create_id");
  if (rdma_bind_addr(id, (struct sockaddr*)&a) != 0) {
    fail("rdma_bind_addr %s:%d: %s", ip, port, strerror(errno));
  }
  if (rdma_listen(id, 4) != 0) fail("rdma_listen: %s", strerror(errno));
  return id;
}

static void resolve(struct rdma_event_channel* ch, struct rdma_cm_id* id,
                    const char* ip, int port) {
  struct sockaddr_in a = address(ip, port);
  if (rdma_resolve_addr(id, NULL, (struct sockaddr*)&a, 2000) != 0) {
    fail("rdma_resolve_addr: %s", strerror(errno));
  }
  expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
  if (rdma_resolve_route(id, 2000) != 0) {
    fail("rdma_resolve_route: %s", strerror(errno));
  }
  expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

static void make_qp(struct rdma_cm_id* id) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  if (rdma_create_qp(id, NULL, &attr) != 0) {
    fail("rdma_create_qp: %s", strerror(errno));
  }
}

/* A connect whose private data is `len` bytes of the pattern `seed`; an id
 * without a queue pair names `qp_num`. */
static int connect_qpn(struct rdma_cm_id* id, size_t len, uint8_t seed,
                       uint32_t qp_num) {
  uint8_t data[256];
  fill(data, len, seed);
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.qp_num = qp_num;
  p.private_data = data;
  p.private_data_len = (uint8_t)len;
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  return rdma_connect(id, &p);
}

static int connect_with(struct rdma_cm_id* id, size_t len, uint8_t seed) {
  return connect_qpn(id, len, seed, 0);
}

/* A connect whose private data is `text` and its NUL. */
static int connect_with_text(struct rdma_cm_id* id, const char* text) {
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.private_data = text;
  p.private_data_len = (uint8_t)(strlen(text) + 1);
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  return rdma_connect(id, &p);
}

static int accept_with(struct rdma_cm_id* id, size_t len, uint8_t seed) {
  uint8_t data[256];
  fill(data, len, seed);
  struct rdma_conn_param p;
  memset(&p, 0, sizeof(p));
  p.private_data = data;
  p.private_data_len = (uint8_t)len;
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.rnr_retry_count = 7;
  return rdma_accept(id, &p);
}

static int reject_with(struct rdma_cm_id* id, size_t len, uint8_t seed) {
  uint8_t data[256];
  fill(data, len, seed);
  return rdma_reject(id, data, (uint8_t)len);
}

/* One message each way: `first` sends first. The buffer is a mapping of
 * its own: heap memory registered through one device cannot be registered
 * through another device of the process while the first is open
 * (docs/verbs.md, section 4), and anyserver serves two. */
static void exchange(struct rdma_cm_id* id, int first, uint8_t seed) {
  uint8_t* buf = mmap(NULL, 2 * MSG_BYTES, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) fail("mmap: %s", strerror(errno));
  uint8_t* out = buf;
  uint8_t* in = buf + MSG_BYTES;
  struct ibv_mr* mr = rdma_reg_msgs(id, buf, 2 * MSG_BYTES);
  if (mr == NULL) fail("rdma_reg_msgs: %s", strerror(errno));
  if (rdma_post_recv(id, NULL, in, MSG_BYTES, mr) != 0) {
    fail("rdma_post_recv: %s", strerror(errno));
  }
  struct ibv_wc wc;
  fill(out, MSG_BYTES, (uint8_t)(seed + (first ? 0 : 1)));
  if (!first) {
    if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
      fail("receive: %s", ibv_wc_status_str(wc.status));
    }
  }
  if (rdma_post_send(id, NULL, out, MSG_BYTES, mr, 0) != 0) {
    fail("rdma_post_send: %s", strerror(errno));
  }
  if (rdma_get_send_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
    fail("send: %s", ibv_wc_status_str(wc.status));
  }
  if (first) {
    if (rdma_get_recv_comp(id, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
      fail("receive: %s", ibv_wc_status_str(wc.status));
    }
  }
  if (wc.byte_len != MSG_BYTES ||
      !same(in, MSG_BYTES, (uint8_t)(seed + (first ? 1 : 0)))) {
    fail("the message received (%u bytes) is not the one sent", wc.byte_len);
  }
  rdma_dereg_mr(mr);
  munmap(buf, 2 * MSG_BYTES);
}

static int server(const char* ip, int port) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == NULL) fail("rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id* tcp = listener(ch, ip, port, RDMA_PS_TCP);
  struct rdma_cm_id* ib = listener(ch, ip, port, RDMA_PS_IB);
  say("listening");

  /* Round 2: 56 bytes arrive; the answers too long are refused here. */
  struct seen r = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  if (r.listen_id != tcp) fail("the RDMA_PS_TCP request came to another id");
  if (r.data_len < REQ_ROOM || !same(r.data, REQ_ROOM, 0x11)) {
    fail("the request's %u bytes of private data are not the 56 sent",
         r.data_len);
  }
  if (accept_with(r.id, REP_ROOM + 1, 0x22) == 0 || errno != EINVAL) {
    fail("an ACCEPT with 197 bytes of private data was not refused (EINVAL)");
  }
  if (reject_with(r.id, REJ_ROOM + 1, 0x33) == 0 || errno != EINVAL) {
    fail("a REJECT with 149 bytes of private data was not refused (EINVAL)");
  }
  if (reject_with(r.id, REJ_ROOM, 0x33) != 0) {
    fail("rdma_reject: %s", strerror(errno));
  }
  rdma_destroy_id(r.id);

  /* Round 3: the PS_IB listener gets the next one. */
  r = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  if (r.listen_id != ib) fail("the RDMA_PS_IB request came to another id");
  if (!same(r.data, REQ_ROOM, 0x44)) fail("PS_IB request's private data");
  make_qp(r.id);
  if (accept_with(r.id, REP_ROOM, 0x55) != 0) {
    fail("rdma_accept: %s", strerror(errno));
  }
  expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  exchange(r.id, 0, 0x60);
  expect(ch, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(r.id);
  rdma_destroy_id(r.id);
  rdma_destroy_id(ib);
  rdma_destroy_id(tcp);
  rdma_destroy_event_channel(ch);
  say("ok");
  return 0;
}

static int client(const char* ip, int port) {
  /* Round 1: migrate before anything is asked. */
  struct rdma_event_channel* first = rdma_create_event_channel();
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (first == NULL || ch == NULL) fail("rdma_create_event_channel");
  struct rdma_cm_id* id;
  if (rdma_create_id(first, &id, NULL, RDMA_PS_TCP) != 0) {
    fail("rdma_create_id");
  }
  if (rdma_migrate_id(id, ch) != 0) {
    fail("rdma_migrate_id: %s", strerror(errno));
  }
  if (id->channel != ch) fail("the id does not name its new channel");
  resolve(ch, id, ip, port);
  struct pollfd pfd = {.fd = first->fd, .events = POLLIN};
  if (poll(&pfd, 1, 0) != 0) {
    fail("the channel the id left reports an event");
  }
  rdma_destroy_event_channel(first);
  say("migrated: ADDR_RESOLVED and ROUTE_RESOLVED on the new channel");

  /* Round 2. */
  if (connect_with(id, REQ_ROOM + 1, 0x11) == 0 || errno != EINVAL) {
    fail("a connect with 57 bytes of private data was not refused (EINVAL)");
  }
  if (connect_with(id, REQ_ROOM, 0x11) != 0) {
    fail("rdma_connect: %s", strerror(errno));
  }
  struct seen r = expect(ch, RDMA_CM_EVENT_REJECTED);
  if (r.status != 28) fail("REJECTED with status %d, not 28", r.status);
  if (r.data_len != REJ_ROOM || !same(r.data, REJ_ROOM, 0x33)) {
    fail("REJECTED carries %u bytes, not the server's 148", r.data_len);
  }
  rdma_destroy_id(id);
  say("private data: 57 bytes refused, REJECTED 28 with 148 bytes");

  /* Round 3. */
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_IB) != 0) fail("rdma_create_id");
  resolve(ch, id, ip, port);
  make_qp(id);
  if (connect_with(id, REQ_ROOM, 0x44) != 0) {
    fail("rdma_connect: %s", strerror(errno));
  }
  r = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  if (r.data_len != REP_ROOM || !same(r.data, REP_ROOM, 0x55)) {
    fail("ESTABLISHED carries %u bytes, not the server's 196", r.data_len);
  }
  exchange(id, 1, 0x60);
  if (rdma_disconnect(id) != 0) fail("rdma_disconnect: %s", strerror(errno));
  expect(ch, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  say("RDMA_PS_IB: 196 bytes in ESTABLISHED, a message each way, "
      "DISCONNECTED");
  say("ok");
  return 0;
}

/* Takes one request and goes away without a word. */
static int vanish(const char* ip, int port) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == NULL) fail("rdma_create_event_channel");
  listener(ch, ip, port, RDMA_PS_TCP);
  say("listening");
  expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  say("vanishing");
  _exit(0);
}

static int lost(const char* ip, int port) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id;
  if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
    fail("rdma_create_id");
  }
  resolve(ch, id, ip, port);
  make_qp(id);
  if (connect_with(id, 8, 0x77) != 0) fail("rdma_connect: %s", strerror(errno));
  struct seen r = expect(ch, RDMA_CM_EVENT_REJECTED);
  say("REJECTED, status %d", r.status);
  say("ok");
  return 0;
}

/* Accepts one request and expects the client to go away before its RTU. */
static int gone(const char* ip, int port) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == NULL) fail("rdma_create_event_channel");
  listener(ch, ip, port, RDMA_PS_TCP);
  say("listening");
  struct seen r = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  make_qp(r.id);
  if (accept_with(r.id, 0, 0) != 0) fail("rdma_accept: %s", strerror(errno));
  r = expect(ch, RDMA_CM_EVENT_REJECTED);
  say("REJECTED, status %d", r.status);
  say("ok");
  return 0;
}

/* Connects with a queue pair the id does not own (so librdmacm leaves
 * CONNECT_RESPONSE and the RTU to the application, as UCX's connection
 * manager has it) and leaves at CONNECT_RESPONSE. */
static int leave(const char* ip, int port) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id;
  if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
    fail("rdma_create_id");
  }
  resolve(ch, id, ip, port);
  struct ibv_pd* pd = ibv_alloc_pd(id->verbs);
  struct ibv_cq* cq = pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
  if (cq == NULL) fail("ibv_alloc_pd or ibv_create_cq: %s", strerror(errno));
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_type = IBV_QPT_RC;
  attr.send_cq = attr.recv_cq = cq;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &attr);
  if (qp == NULL) fail("ibv_create_qp: %s", strerror(errno));
  if (connect_qpn(id, 8, 0x77, qp->qp_num) != 0) {
    fail("rdma_connect: %s", strerror(errno));
  }
  expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
  say("leaving");
  _exit(0);
}

/* The IPv4 address of `ctx`'s port 1 (its GID 0, ::ffff:a.b.c.d). */
static uint32_t device_ip(struct ibv_context* ctx) {
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, 0, &gid) != 0) fail("ibv_query_gid");
  uint32_t ip;
  memcpy(&ip, gid.raw + 12, sizeof(ip));
  return ip;
}

static const char* ip_text(uint32_t ip, char* buf) {
  struct in_addr a = {.s_addr = ip};
  return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

static int anyserver(const char* ip, int port, int count) {
  int devices = 0;
  struct ibv_device** list = ibv_get_device_list(&devices);
  if (list == NULL || devices < 2) {
    fail("anyserver needs two devices or more, the process has %d", devices);
  }
  ibv_free_device_list(list);
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == NULL) fail("rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id* l = listener(ch, ip, port, RDMA_PS_TCP);
  if (l->verbs != NULL) fail("an id bound to 0.0.0.0 names a device");
  say("listening");
  for (int i = 0; i < count; ++i) {
    struct seen r = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (r.listen_id != l) fail("the request came to another id");
    if (r.id->verbs == NULL) fail("the request's id has no device");
    char aimed[INET_ADDRSTRLEN] = "", local[INET_ADDRSTRLEN], dev[INET_ADDRSTRLEN];
    /* (The REQ's private data arrives padded to its room.) */
    memcpy(aimed, r.data,
           r.data_len < sizeof(aimed) - 1 ? r.data_len : sizeof(aimed) - 1);
    const struct sockaddr_in* la =
        (const struct sockaddr_in*)rdma_get_local_addr(r.id);
    if (la->sin_family != AF_INET || ntohs(la->sin_port) != port) {
      fail("the request's local address is not an IPv4 address on port %d",
           port);
    }
    ip_text(la->sin_addr.s_addr, local);
    ip_text(device_ip(r.id->verbs), dev);
    const char* name = ibv_get_device_name(r.id->verbs->device);
    if (strcmp(aimed, local) != 0 || strcmp(local, dev) != 0) {
      fail("a request for %s arrived on %s (address %s) with local address %s",
           aimed, name, dev, local);
    }
    make_qp(r.id);
    if (accept_with(r.id, 0, 0) != 0) fail("rdma_accept: %s", strerror(errno));
    expect(ch, RDMA_CM_EVENT_ESTABLISHED);
    exchange(r.id, 0, 0x80);
    expect(ch, RDMA_CM_EVENT_DISCONNECTED);
    rdma_destroy_qp(r.id);
    rdma_destroy_id(r.id);
    say("request for %s on %s", local, name);
  }
  rdma_destroy_id(l);
  rdma_destroy_event_channel(ch);
  say("ok");
  return 0;
}

static int reach(const char* ip, int port, const char* source) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  struct rdma_cm_id* id;
  if (ch == NULL || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
    fail("rdma_create_id");
  }
  if (source != NULL) {
    struct sockaddr_in a = address(source, 0);
    if (rdma_bind_addr(id, (struct sockaddr*)&a) != 0) {
      fail("rdma_bind_addr %s: %s", source, strerror(errno));
    }
    if (id->verbs == NULL) fail("an id bound to %s names no device", source);
  }
  resolve(ch, id, ip, port);
  const struct sockaddr_in* la =
      (const struct sockaddr_in*)rdma_get_local_addr(id);
  char local[INET_ADDRSTRLEN], dev[INET_ADDRSTRLEN];
  ip_text(la->sin_addr.s_addr, local);
  ip_text(device_ip(id->verbs), dev);
  if (strcmp(local, dev) != 0) {
    fail("resolved from %s, but its device %s has address %s", local,
         ibv_get_device_name(id->verbs->device), dev);
  }
  say("resolved %s on %s from %s", ip, ibv_get_device_name(id->verbs->device),
      local);
  make_qp(id);
  if (connect_with_text(id, ip) != 0) {
    fail("rdma_connect: %s", strerror(errno));
  }
  expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  exchange(id, 1, 0x80);
  if (rdma_disconnect(id) != 0) fail("rdma_disconnect: %s", strerror(errno));
  expect(ch, RDMA_CM_EVENT_DISCONNECTED);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  say("ok");
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 4 && strcmp(argv[1], "anyserver") == 0 && argc == 5) {
    return anyserver(argv[2], atoi(argv[3]), atoi(argv[4]));
  }
  if (argc >= 4 && strcmp(argv[1], "reach") == 0 && argc <= 5) {
    return reach(argv[2], atoi(argv[3]), argc == 5 ? argv[4] : NULL);
  }
  if (argc != 4) {
    fprintf(stderr,
            "usage: cm_probe server|client|vanish|lost|gone|leave ADDRESS "
            "PORT\n"
            "       cm_probe anyserver 0.0.0.0 PORT COUNT\n"
            "       cm_probe reach ADDRESS PORT [SOURCE]\n");
    return 2;
  }
  const int port = atoi(argv[3]);
  if (strcmp(argv[1], "server") == 0) return server(argv[2], port);
  if (strcmp(argv[1], "client") == 0) return client(argv[2], port);
  if (strcmp(argv[1], "vanish") == 0) return vanish(argv[2], port);
  if (strcmp(argv[1], "lost") == 0) return lost(argv[2], port);
  if (strcmp(argv[1], "gone") == 0) return gone(argv[2], port);
  if (strcmp(argv[1], "leave") == 0) return leave(argv[2], port);
  fprintf(stderr, "cm_probe: unknown role %s\n", argv[1]);
  return 2;
}
