/* Verbs conformance of librdmaplane-verbs, checked against what the
 * libibverbs man pages promise (ibv_post_send(3), ibv_post_recv(3),
 * ibv_modify_qp(3), ibv_poll_cq(3), ibv_reg_mr(3), ibv_req_notify_cq(3),
 * ibv_get_cq_event(3), ibv_create_qp(3), ibv_create_cq(3), ibv_alloc_pd(3))
 * and what rdmaplane documents it serves and refuses (docs/verbs.md).
 *
 *   conformance_test IP_OF_RDMAPLANE0 IP_OF_RDMAPLANE1
 *   conformance_test --device-fatal
 *   conformance_test --port-down
 *
 * Run with RDMAPLANE_SOCKET=A:B naming two daemons joined by a data port
 * (conformance_test.sh starts them): this one process opens rdmaplane0 and
 * rdmaplane1 and connects a queue pair on each to one on the other, with
 * the other device's GID from ibv_query_gid. It links the verbs front end
 * directly, as an application under LD_PRELOAD would bind to it.
 *
 * Every check prints "PASS: name" or "FAIL: name: details"; the exit status
 * is 1 when any check failed. A watchdog ends the process (status 3) when
 * one step hangs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --- Checks and the watchdog ------------------------------------------- */

static int g_passed;
static int g_failed;
static const char* volatile g_step = "start-up";

/* Records one check; returns ok. */
static bool check(bool ok, const char* name, const char* fmt, ...) {
  if (ok) {
    printf("PASS: %s\n", name);
    ++g_passed;
  } else {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    printf("FAIL: %s: %s\n", name, detail);
    ++g_failed;
  }
  fflush(stdout);
  return ok;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char head[] =
      "FAIL: watchdog: this step did not finish within 30 s: ";
  ssize_t ignored = write(STDOUT_FILENO, head, sizeof(head) - 1);
  const char* step = g_step;
  ignored = write(STDOUT_FILENO, step, strlen(step));
  ignored = write(STDOUT_FILENO, "\n", 1);
  (void)ignored;
  _exit(3);
}

/* Starts a group of checks: its name, and 30 s for it. */
static void step(const char* name) {
  g_step = name;
  printf("--- %s\n", name);
  fflush(stdout);
  alarm(30);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* --- Memory ------------------------------------------------------------ */

/* Buffers on pages of their own (anonymous mmap): the two devices of this
 * process never share a page by accident. They are never unmapped, nor are
 * registered malloc buffers freed: each check gets memory at addresses no
 * registration used before, and the one check about a reused address
 * ("a new mapping at an address used before") makes its own. */
/* A mapping of its own: an inaccessible guard page after it keeps the
 * kernel from merging it with the next one. Registering moves a window of
 * up to 2 MiB of a mapping onto memory shared with one daemon
 * (docs/verbs.md), so buffers of the two devices must not share one. */
static uint8_t* pages(size_t bytes) {
  const size_t page = 4096;
  const size_t len = (bytes + page - 1) / page * page;
  uint8_t* p = mmap(NULL, len + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || mprotect(p + len, page, PROT_NONE) != 0) {
    perror("mmap");
    exit(2);
  }
  return p;
}

/* Fills with a pattern that depends on seed and position. */
static void fill(uint8_t* p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

/* The first index where a and b differ, or n. */
static size_t first_diff(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return i;
  }
  return n;
}

/* Whether p[0, n) is all `value`. */
static bool all_bytes(const uint8_t* p, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

/* --- Devices, queue pairs and completions ------------------------------ */

enum {
  kRemoteAccess =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
};

struct dev {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  union ibv_gid gid;
  const char* ip;
};

static struct dev g_dev[2];

/* One end of a connection: its CQ (with a completion channel or not) and
 * queue pair. */
struct side {
  struct dev* dev;
  struct ibv_comp_channel* channel;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_qp_cap cap; /* what ibv_create_qp reported */
};

/* s[0] on rdmaplane0, s[1] on rdmaplane1. */
struct pair {
  struct side s[2];
};

struct qp_opts {
  int sq_sig_all;
  uint32_t max_send_wr;
  uint32_t max_send_sge;
  uint32_t max_inline_data;
  bool channel;
  uint8_t timeout; /* the local ACK timeout code; 0: 14 (67 ms) */
  uint32_t max_recv_wr;  /* 0: 1 */
  uint32_t max_recv_sge; /* 0: 1 */
  uint8_t min_rnr_timer; /* set at RTR (this side's RNR NAKs); 0: 12 */
  uint8_t rnr_retry;     /* set at RTS; 0: 7 (for ever) */
  enum ibv_qp_type qp_type; /* 0: IBV_QPT_RC */
  int cqe;                  /* the CQ's entries; 0: 256 */
};

static const struct qp_opts kDefaultOpts = {
    .sq_sig_all = 0, .max_send_wr = 64, .max_send_sge = 16};

static uint32_t g_psn = 0x1000;

static bool make_side(struct side* s, struct dev* d, const struct qp_opts* o) {
  memset(s, 0, sizeof(*s));
  s->dev = d;
  if (o->channel) {
    s->channel = ibv_create_comp_channel(d->ctx);
    if (s->channel == NULL) {
      check(false, "ibv_create_comp_channel", "errno %d", errno);
      return false;
    }
  }
  s->cq = ibv_create_cq(d->ctx, o->cqe != 0 ? o->cqe : 256, s, s->channel, 0);
  if (s->cq == NULL) {
    check(false, "ibv_create_cq", "errno %d", errno);
    return false;
  }
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = s->cq;
  init.recv_cq = s->cq;
  init.qp_type = o->qp_type != 0 ? o->qp_type : IBV_QPT_RC;
  init.sq_sig_all = o->sq_sig_all;
  init.cap.max_send_wr = o->max_send_wr;
  init.cap.max_recv_wr = o->max_recv_wr != 0 ? o->max_recv_wr : 1;
  init.cap.max_send_sge = o->max_send_sge;
  init.cap.max_recv_sge = o->max_recv_sge != 0 ? o->max_recv_sge : 1;
  init.cap.max_inline_data = o->max_inline_data;
  s->qp = ibv_create_qp(d->pd, &init);
  if (s->qp == NULL) {
    check(false, "ibv_create_qp", "errno %d", errno);
    return false;
  }
  s->cap = init.cap;
  return true;
}

static void free_side(struct side* s) {
  if (s->qp != NULL && ibv_destroy_qp(s->qp) != 0) {
    check(false, "ibv_destroy_qp", "failed");
  }
  if (s->cq != NULL && ibv_destroy_cq(s->cq) != 0) {
    check(false, "ibv_destroy_cq", "failed");
  }
  if (s->channel != NULL && ibv_destroy_comp_channel(s->channel) != 0) {
    check(false, "ibv_destroy_comp_channel", "failed");
  }
  memset(s, 0, sizeof(*s));
}

/* RESET -> INIT with the attributes ibv_modify_qp(3) requires for RC. */
static int to_init(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  /* The remote operations its responder serves (atomics too: the MRs say
   * where; without the QP's consent an atomic is a remote access error). */
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  return ibv_modify_qp(
      qp, &a,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static void rtr_attr(struct ibv_qp_attr* a, const union ibv_gid* dgid,
                     uint32_t dest_qpn, uint32_t rq_psn) {
  memset(a, 0, sizeof(*a));
  a->qp_state = IBV_QPS_RTR;
  a->path_mtu = IBV_MTU_4096;
  a->dest_qp_num = dest_qpn;
  a->rq_psn = rq_psn;
  a->max_dest_rd_atomic = 16;
  a->min_rnr_timer = 12;
  a->ah_attr.is_global = 1;
  a->ah_attr.grh.dgid = *dgid;
  a->ah_attr.grh.sgid_index = 0;
  a->ah_attr.grh.hop_limit = 64;
  a->ah_attr.port_num = 1;
}

enum {
  kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
  kRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
};

static int to_rtr(struct ibv_qp* qp, const union ibv_gid* dgid,
                  uint32_t dest_qpn, uint32_t rq_psn) {
  struct ibv_qp_attr a;
  rtr_attr(&a, dgid, dest_qpn, rq_psn);
  return ibv_modify_qp(qp, &a, kRtrMask);
}

static void rts_attr(struct ibv_qp_attr* a, uint32_t sq_psn) {
  memset(a, 0, sizeof(*a));
  a->qp_state = IBV_QPS_RTS;
  a->sq_psn = sq_psn;
  a->timeout = 14; /* 4.096 us * 2^14: 67 ms */
  a->retry_cnt = 7;
  a->rnr_retry = 7;
  a->max_rd_atomic = 16;
}

static int to_rts(struct ibv_qp* qp, uint32_t sq_psn) {
  struct ibv_qp_attr a;
  rts_attr(&a, sq_psn);
  return ibv_modify_qp(qp, &a, kRtsMask);
}

/* RTR -> RTS with the ACK timeout and RNR retry count of o. */
static int to_rts_opts(struct ibv_qp* qp, uint32_t sq_psn,
                       const struct qp_opts* o) {
  struct ibv_qp_attr a;
  rts_attr(&a, sq_psn);
  if (o->timeout != 0) a.timeout = o->timeout;
  if (o->rnr_retry != 0) a.rnr_retry = o->rnr_retry;
  return ibv_modify_qp(qp, &a, kRtsMask);
}

static int to_state(struct ibv_qp* qp, enum ibv_qp_state state) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = state;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static enum ibv_qp_state qp_state(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr init;
  memset(&a, 0, sizeof(a));
  a.qp_state = (enum ibv_qp_state) - 1;
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init) != 0) {
    return (enum ibv_qp_state) - 1;
  }
  return a.qp_state;
}

/* Both ends of p through RESET -> INIT. */
static bool pair_to_init(struct pair* p) {
  for (int i = 0; i < 2; ++i) {
    int r = to_init(p->s[i].qp);
    if (r != 0)
      return check(false, "connect: RESET->INIT", "side %d: %d", i, r);
  }
  return true;
}

/* Both ends of p, in INIT, through RTR -> RTS, each aimed at the other
 * (the other device's GID, its QPN, the PSNs crossed), with the RNR
 * timer, ACK timeout and RNR retry count of their options. */
static bool pair_to_rts(struct pair* p, const struct qp_opts* o0,
                        const struct qp_opts* o1) {
  const struct qp_opts* opts[2] = {o0, o1};
  const uint32_t psn[2] = {g_psn, g_psn + 0x100};
  g_psn += 0x10000;
  for (int i = 0; i < 2; ++i) {
    const int o = 1 - i;
    struct ibv_qp_attr a;
    rtr_attr(&a, &g_dev[o].gid, p->s[o].qp->qp_num, psn[o]);
    if (opts[i]->min_rnr_timer != 0) a.min_rnr_timer = opts[i]->min_rnr_timer;
    int r = ibv_modify_qp(p->s[i].qp, &a, kRtrMask);
    if (r != 0) return check(false, "connect: INIT->RTR", "side %d: %d", i, r);
  }
  for (int i = 0; i < 2; ++i) {
    int r = to_rts_opts(p->s[i].qp, psn[i], opts[i]);
    if (r != 0) return check(false, "connect: RTR->RTS", "side %d: %d", i, r);
  }
  return true;
}

/* Both ends through RESET -> INIT -> RTR -> RTS (pair_to_rts). */
static bool connect_pair(struct pair* p, const struct qp_opts* o0,
                         const struct qp_opts* o1) {
  memset(p, 0, sizeof(*p));
  if (!make_side(&p->s[0], &g_dev[0], o0) ||
      !make_side(&p->s[1], &g_dev[1], o1)) {
    return false;
  }
  return pair_to_init(p) && pair_to_rts(p, o0, o1);
}

static void free_pair(struct pair* p) {
  free_side(&p->s[0]);
  free_side(&p->s[1]);
}

/* Polls cq until `want` completions are in wc[] or timeout_ms passed;
 * returns how many came (a poll error counts as a failed check). */
static int wait_wcs(struct ibv_cq* cq, struct ibv_wc* wc, int want,
                    int timeout_ms) {
  int got = 0;
  const double until = now_s() + timeout_ms / 1000.0;
  while (got < want) {
    const int n = ibv_poll_cq(cq, want - got, wc + got);
    if (n < 0) {
      check(false, "ibv_poll_cq", "returned %d", n);
      return got;
    }
    got += n;
    if (got >= want) break;
    if (now_s() > until) break;
    if (n == 0) sleep_us(50);
  }
  return got;
}

/* Completions that arrive within ms (when none should). */
static int extra_wcs(struct ibv_cq* cq, int ms) {
  struct ibv_wc wc[16];
  int extra = 0;
  const double until = now_s() + ms / 1000.0;
  while (now_s() < until) {
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n > 0) extra += n;
    sleep_us(1000);
  }
  return extra;
}

/* Takes every completion cq holds now; returns how many. */
static int drain_cq(struct ibv_cq* cq) {
  struct ibv_wc wc[16];
  int taken = 0;
  int n;
  while ((n = ibv_poll_cq(cq, 16, wc)) > 0) taken += n;
  return taken;
}

static struct ibv_send_wr rdma_wr(enum ibv_wr_opcode op, uint64_t wr_id,
                                  struct ibv_sge* sge, int num_sge,
                                  uint64_t remote_addr, uint32_t rkey,
                                  unsigned flags) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

static struct ibv_sge sge_of(const void* addr, uint32_t length, uint32_t lkey) {
  struct ibv_sge s;
  s.addr = (uint64_t)(uintptr_t)addr;
  s.length = length;
  s.lkey = lkey;
  return s;
}

/* Posts one signaled WR and waits for its completion; returns its status,
 * or -1 (after a failed check) when the post failed, nothing completed
 * within 10 s or another WR completed. */
static int post_once(struct side* s, struct ibv_send_wr* wr, const char* name,
                     struct ibv_wc* out) {
  struct ibv_send_wr* bad = NULL;
  int r = ibv_post_send(s->qp, wr, &bad);
  if (r != 0) {
    check(false, name, "ibv_post_send returned %d", r);
    return -1;
  }
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  if (wait_wcs(s->cq, &wc, 1, 10000) != 1) {
    check(false, name, "no completion within 10 s");
    return -1;
  }
  if (wc.wr_id != wr->wr_id) {
    check(false, name, "completion of wr_id %llu, expected %llu",
          (unsigned long long)wc.wr_id, (unsigned long long)wr->wr_id);
    return -1;
  }
  if (out != NULL) *out = wc;
  return (int)wc.status;
}

/* ... a WRITE or READ. */
static int rdma_once(struct side* s, enum ibv_wr_opcode op, uint64_t wr_id,
                     struct ibv_sge* sge, int num_sge, uint64_t remote_addr,
                     uint32_t rkey, const char* name, struct ibv_wc* out) {
  struct ibv_send_wr wr =
      rdma_wr(op, wr_id, sge, num_sge, remote_addr, rkey, IBV_SEND_SIGNALED);
  return post_once(s, &wr, name, out);
}

static struct ibv_mr* reg(struct dev* d, void* addr, size_t len, int access,
                          const char* what) {
  struct ibv_mr* mr = ibv_reg_mr(d->pd, addr, len, access);
  if (mr == NULL) check(false, what, "ibv_reg_mr failed: errno %d", errno);
  return mr;
}

static void dereg(struct ibv_mr* mr) {
  if (mr != NULL && ibv_dereg_mr(mr) != 0) {
    check(false, "ibv_dereg_mr", "failed");
  }
}

/* The status names of <infiniband/verbs.h> (ibv_wc_status_str is
 * libibverbs' own, which this program does not link). */
static const char* wc_name(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    default:
      return status < 0 ? "none" : "another status";
  }
}

/* --- Devices ----------------------------------------------------------- */

static bool gid_is_ipv4(const union ibv_gid* g, const char* ip) {
  unsigned a, b, c, d;
  if (sscanf(ip, "%u.%u.%u.%u", &a, &b, &c, &d) != 4) return false;
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return memcmp(g->raw, kPrefix, 12) == 0 && g->raw[12] == a &&
         g->raw[13] == b && g->raw[14] == c && g->raw[15] == d;
}

/* "rdmaplaneI: what", for the checks made on each device. */
static const char* on_dev(int i, const char* what) {
  static char name[256];
  snprintf(name, sizeof(name), "rdmaplane%d: %s", i, what);
  return name;
}

static bool t_devices(void) {
  step("devices and queries");
  int n = -1;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!check(list != NULL && n == 2, "ibv_get_device_list lists both daemons",
             "list %p, %d devices", (void*)list, n)) {
    if (list != NULL) ibv_free_device_list(list);
    return false;
  }
  check(list[2] == NULL, "the device list ends with NULL", "list[2] %p",
        (void*)list[2]);
  for (int i = 0; i < 2; ++i) {
    char want[32];
    snprintf(want, sizeof(want), "rdmaplane%d", i);
    const char* name = ibv_get_device_name(list[i]);
    check(name != NULL && strcmp(name, want) == 0,
          on_dev(i, "device names follow RDMAPLANE_SOCKET's order"),
          "device %d is %s", i, name ? name : "(null)");
    g_dev[i].ctx = ibv_open_device(list[i]);
    if (!check(g_dev[i].ctx != NULL, on_dev(i, "ibv_open_device"),
               "%s: errno %d", want, errno)) {
      ibv_free_device_list(list);
      return false;
    }
    const __be64 guid = ibv_get_device_guid(list[i]);
    struct ibv_device_attr da;
    memset(&da, 0, sizeof(da));
    int r = ibv_query_device(g_dev[i].ctx, &da);
    check(r == 0 && da.phys_port_cnt == 1 && da.max_qp > 0 &&
              da.max_qp_wr > 0 && da.max_sge >= 1 && da.max_cqe > 0,
          on_dev(i, "ibv_query_device: one port and non-zero limits"),
          "r %d ports %u max_qp %d max_qp_wr %d max_sge %d max_cqe %d", r,
          da.phys_port_cnt, da.max_qp, da.max_qp_wr, da.max_sge, da.max_cqe);
    check(r == 0 && da.atomic_cap == IBV_ATOMIC_HCA,
          on_dev(i, "ibv_query_device: atomics served (IBV_ATOMIC_HCA)"),
          "atomic_cap %d", da.atomic_cap);
    check(r == 0 && da.vendor_id != 0 && da.vendor_id != 0x02c9,
          on_dev(i, "ibv_query_device: a vendor id, not 0 and not Mellanox's"),
          "vendor_id 0x%x", da.vendor_id);
    struct ibv_device_attr_ex dax;
    memset(&dax, 0xA5, sizeof(dax));
    r = ibv_query_device_ex(g_dev[i].ctx, NULL, &dax);
    check(r == 0 && dax.phys_port_cnt_ex == da.phys_port_cnt &&
              dax.orig_attr.max_qp == da.max_qp &&
              dax.orig_attr.vendor_id == da.vendor_id && dax.comp_mask == 0,
          on_dev(i, "ibv_query_device_ex: phys_port_cnt_ex is phys_port_cnt, "
                    "orig_attr is ibv_query_device's, no extension claimed"),
          "r %d phys_port_cnt_ex %u max_qp %d comp_mask %llu", r,
          dax.phys_port_cnt_ex, dax.orig_attr.max_qp,
          (unsigned long long)dax.comp_mask);
    struct ibv_query_device_ex_input input;
    memset(&input, 0, sizeof(input));
    input.comp_mask = 1;
    check(ibv_query_device_ex(g_dev[i].ctx, &input, &dax) == EINVAL,
          on_dev(i, "ibv_query_device_ex with an unknown input comp_mask "
                    "fails with EINVAL"),
          "accepted");
    check(guid != 0 && guid == da.node_guid,
          on_dev(i, "ibv_get_device_guid is the node GUID"),
          "guid %llx node_guid %llx", (unsigned long long)guid,
          (unsigned long long)da.node_guid);

    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof(pa));
    r = ibv_query_port(g_dev[i].ctx, 1, &pa);
    check(r == 0 && pa.state == IBV_PORT_ACTIVE, on_dev(i, "port 1 is active"),
          "r %d state %d", r, pa.state);
    check(r == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET,
          on_dev(i, "port 1's link layer is Ethernet"), "link_layer %d",
          pa.link_layer);
    check(
        r == 0 && pa.active_mtu == IBV_MTU_4096 && pa.max_mtu >= pa.active_mtu,
        on_dev(i, "port 1's active MTU is 4096"), "active %d max %d",
        pa.active_mtu, pa.max_mtu);
    check(r == 0 && pa.gid_tbl_len >= 1, on_dev(i, "port 1 has a GID table"),
          "gid_tbl_len %d", pa.gid_tbl_len);
    struct ibv_port_attr pa2;
    memset(&pa2, 0, sizeof(pa2));
    check(ibv_query_port(g_dev[i].ctx, 2, &pa2) != 0,
          on_dev(i, "ibv_query_port of a port that does not exist fails"),
          "port 2 answered");

    r = ibv_query_gid(g_dev[i].ctx, 1, 0, &g_dev[i].gid);
    check(r == 0 && gid_is_ipv4(&g_dev[i].gid, g_dev[i].ip),
          on_dev(i, "GID 0 is the daemon's IPv4-mapped address"),
          "r %d, expected ::ffff:%s", r, g_dev[i].ip);
    struct ibv_gid_entry entry;
    memset(&entry, 0, sizeof(entry));
    r = ibv_query_gid_ex(g_dev[i].ctx, 1, 0, &entry, 0);
    check(r == 0 && entry.gid_type == IBV_GID_TYPE_ROCE_V2 &&
              memcmp(&entry.gid, &g_dev[i].gid, sizeof(entry.gid)) == 0 &&
              entry.port_num == 1 && entry.gid_index == 0,
          on_dev(i, "ibv_query_gid_ex: GID 0 is RoCE v2"),
          "r %d type %u port %u", r, entry.gid_type, entry.port_num);
    union ibv_gid other;
    check(ibv_query_gid(g_dev[i].ctx, 1, pa.gid_tbl_len, &other) != 0,
          on_dev(i, "ibv_query_gid beyond the GID table fails"),
          "index %d answered", pa.gid_tbl_len);
    g_dev[i].pd = ibv_alloc_pd(g_dev[i].ctx);
    if (!check(g_dev[i].pd != NULL, on_dev(i, "ibv_alloc_pd"), "errno %d",
               errno)) {
      ibv_free_device_list(list);
      return false;
    }
  }
  ibv_free_device_list(list);
  return true;
}

/* --- Helpers that need no device ---------------------------------------- */

static void t_helpers(void) {
  step("helpers");
  check(strcmp(ibv_event_type_str(IBV_EVENT_COMM_EST),
               "communication established") == 0 &&
            strcmp(ibv_event_type_str(IBV_EVENT_QP_FATAL),
                   "local work queue catastrophic error") == 0 &&
            strcmp(ibv_event_type_str((enum ibv_event_type)999), "unknown") ==
                0,
        "ibv_event_type_str names events, and 'unknown' for others", "%s",
        ibv_event_type_str(IBV_EVENT_COMM_EST));
  check(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0 &&
            strcmp(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR),
                   "Work Request Flushed Error") == 0 &&
            strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR),
                   "transport retry counter exceeded") == 0 &&
            strcmp(ibv_wc_status_str((enum ibv_wc_status)-1), "unknown") == 0,
        "ibv_wc_status_str names statuses", "%s",
        ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
  check(strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter") ==
                0 &&
            strcmp(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown") == 0,
        "ibv_node_type_str", "%s", ibv_node_type_str(IBV_NODE_CA));
  check(strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0 &&
            strcmp(ibv_port_state_str(IBV_PORT_DOWN), "down") == 0,
        "ibv_port_state_str", "%s", ibv_port_state_str(IBV_PORT_ACTIVE));
  check(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4 &&
            mult_to_ibv_rate(4) == IBV_RATE_10_GBPS &&
            ibv_rate_to_mult(IBV_RATE_100_GBPS) == -1 &&
            mult_to_ibv_rate(7) == IBV_RATE_MAX,
        "ibv_rate_to_mult and mult_to_ibv_rate", "10G -> %d",
        ibv_rate_to_mult(IBV_RATE_10_GBPS));
  check(ibv_rate_to_mbps(IBV_RATE_25_GBPS) == 25781 &&
            mbps_to_ibv_rate(103125) == IBV_RATE_100_GBPS &&
            ibv_rate_to_mbps(IBV_RATE_MAX) == -1 &&
            mbps_to_ibv_rate(1) == IBV_RATE_MAX,
        "ibv_rate_to_mbps and mbps_to_ibv_rate", "25G -> %d",
        ibv_rate_to_mbps(IBV_RATE_25_GBPS));
  /* Registered memory is a shared mapping: a child shares it, so fork
   * support is never needed (ibv_is_fork_initialized(3)). */
  check(ibv_fork_init() == 0 && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED,
        "ibv_fork_init succeeds and fork support is unneeded", "status %d",
        (int)ibv_is_fork_initialized());
}

/* --- Creating and destroying ------------------------------------------- */

static void t_lifecycle(void) {
  step("PD, MR, CQ and QP create and destroy");
  struct dev* d = &g_dev[0];
  struct ibv_pd* pd = ibv_alloc_pd(d->ctx);
  if (!check(pd != NULL, "ibv_alloc_pd of a second PD", "errno %d", errno))
    return;
  uint8_t* buf = pages(65536);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, 65536, kRemoteAccess);
  check(mr != NULL && mr->addr == buf && mr->length == 65536 && mr->pd == pd,
        "ibv_reg_mr returns an MR of the range", "mr %p errno %d", (void*)mr,
        errno);
  struct ibv_cq* cq = ibv_create_cq(d->ctx, 100, NULL, NULL, 0);
  check(cq != NULL && cq->cqe >= 100, "ibv_create_cq: at least cqe entries",
        "cq %p cqe %d", (void*)cq, cq ? cq->cqe : -1);
  errno = 0;
  struct ibv_cq* bad_cq =
      ibv_create_cq(d->ctx, 16, NULL, NULL, d->ctx->num_comp_vectors);
  check(bad_cq == NULL,
        "ibv_create_cq with comp_vector >= num_comp_vectors fails",
        "created one with comp_vector %d", d->ctx->num_comp_vectors);
  if (bad_cq != NULL) ibv_destroy_cq(bad_cq);
  /* ibv_query_device's max_cqe is what a CQ takes, and no more; a device
   * of this kind offers at least 65535 entries and 1024 CQs. */
  struct ibv_device_attr da;
  memset(&da, 0, sizeof(da));
  if (ibv_query_device(d->ctx, &da) == 0) {
    check(da.max_cqe >= 65535 && da.max_cq >= 1024,
          "ibv_query_device: max_cqe >= 65535 and max_cq >= 1024",
          "max_cqe %d max_cq %d", da.max_cqe, da.max_cq);
    struct ibv_cq* big = ibv_create_cq(d->ctx, da.max_cqe, NULL, NULL, 0);
    check(big != NULL && big->cqe >= da.max_cqe,
          "ibv_create_cq with max_cqe entries", "cq %p errno %d", (void*)big,
          errno);
    if (big != NULL) ibv_destroy_cq(big);
    errno = 0;
    struct ibv_cq* over = ibv_create_cq(d->ctx, da.max_cqe + 1, NULL, NULL, 0);
    check(over == NULL && errno == EINVAL,
          "ibv_create_cq with max_cqe + 1 entries fails with EINVAL",
          "cq %p errno %d", (void*)over, errno);
    if (over != NULL) ibv_destroy_cq(over);
    struct ibv_cq* many[1024];
    int made = 0;
    while (made < 1024 &&
           (many[made] = ibv_create_cq(d->ctx, 1, NULL, NULL, 0)) != NULL) {
      ++made;
    }
    check(made == 1024, "1024 CQs on one context", "%d made, errno %d", made,
          errno);
    while (made > 0) ibv_destroy_cq(many[--made]);
  }

  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.qp_context = buf;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 1;
  init.cap.max_send_wr = 10;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 3;
  init.cap.max_recv_sge = 1;
  struct ibv_qp* qp = cq ? ibv_create_qp(pd, &init) : NULL;
  if (check(qp != NULL, "ibv_create_qp of an RC QP", "errno %d", errno)) {
    check(init.cap.max_send_wr >= 10 && init.cap.max_send_sge >= 3,
          "ibv_create_qp reports capabilities at least those asked for",
          "max_send_wr %u max_send_sge %u", init.cap.max_send_wr,
          init.cap.max_send_sge);
    check(qp->qp_num != 0 && qp->qp_type == IBV_QPT_RC && qp->pd == pd &&
              qp->send_cq == cq && qp->qp_context == buf,
          "the QP carries its number, type, PD, CQ and context", "qp_num %u",
          qp->qp_num);
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr qi;
    memset(&a, 0, sizeof(a));
    memset(&qi, 0, sizeof(qi));
    int r = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP, &qi);
    check(r == 0 && a.qp_state == IBV_QPS_RESET,
          "a new QP is in RESET (ibv_query_qp)", "r %d state %d", r,
          a.qp_state);
    check(r == 0 && qi.qp_type == IBV_QPT_RC && qi.sq_sig_all == 1 &&
              qi.send_cq == cq && qi.cap.max_send_wr >= 10,
          "ibv_query_qp's init_attr is what the QP was made with",
          "type %d sig_all %d max_send_wr %u", qi.qp_type, qi.sq_sig_all,
          qi.cap.max_send_wr);
  }

  int r = ibv_dealloc_pd(pd);
  check(r == EBUSY, "ibv_dealloc_pd with an MR and a QP in it fails with EBUSY",
        "returned %d", r);
  if (cq != NULL && qp != NULL) {
    r = ibv_destroy_cq(cq);
    check(r == EBUSY, "ibv_destroy_cq of a CQ a QP uses fails with EBUSY",
          "returned %d", r);
  }
  if (qp != NULL) {
    r = ibv_destroy_qp(qp);
    check(r == 0, "ibv_destroy_qp", "returned %d", r);
  }
  r = ibv_dealloc_pd(pd);
  check(r == EBUSY, "ibv_dealloc_pd with an MR still in it fails with EBUSY",
        "returned %d", r);
  if (mr != NULL) {
    r = ibv_dereg_mr(mr);
    check(r == 0, "ibv_dereg_mr", "returned %d", r);
  }
  if (cq != NULL) {
    r = ibv_destroy_cq(cq);
    check(r == 0, "ibv_destroy_cq", "returned %d", r);
  }
  r = ibv_dealloc_pd(pd);
  check(r == 0, "ibv_dealloc_pd of an empty PD", "returned %d", r);

  /* ibv_create_cq(3): "ibv_destroy_cq() fails if any queue pair is still
   * associated with this CQ" -- the receive CQ as much as the send CQ. */
  struct ibv_cq* scq = ibv_create_cq(d->ctx, 16, NULL, NULL, 0);
  struct ibv_cq* rcq = ibv_create_cq(d->ctx, 16, NULL, NULL, 0);
  if (scq != NULL && rcq != NULL) {
    memset(&init, 0, sizeof(init));
    init.send_cq = scq;
    init.recv_cq = rcq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = ibv_create_qp(d->pd, &init);
    if (check(qp != NULL, "ibv_create_qp with separate send and receive CQs",
              "errno %d", errno)) {
      r = ibv_destroy_cq(rcq);
      if (check(r == EBUSY,
                "ibv_destroy_cq of a QP's receive CQ fails with EBUSY",
                "returned %d", r) ||
          r != 0) {
        /* still there */
      } else {
        rcq = NULL; /* destroyed under the QP */
      }
      ibv_destroy_qp(qp);
    }
  }
  if (scq != NULL) ibv_destroy_cq(scq);
  if (rcq != NULL) ibv_destroy_cq(rcq);

  /* A channel with a CQ on it is busy; without, it goes. */
  struct ibv_comp_channel* ch = ibv_create_comp_channel(d->ctx);
  if (check(ch != NULL && ch->fd >= 0, "ibv_create_comp_channel", "errno %d",
            errno)) {
    struct ibv_cq* ccq = ibv_create_cq(d->ctx, 8, NULL, ch, 0);
    check(ccq != NULL && ccq->channel == ch,
          "ibv_create_cq on a completion channel", "errno %d", errno);
    if (ccq != NULL) ibv_destroy_cq(ccq);
    r = ibv_destroy_comp_channel(ch);
    check(r == 0, "ibv_destroy_comp_channel", "returned %d", r);
  }
}

/* --- The QP state machine ---------------------------------------------- */

/* ibv_post_send on qp must fail with EINVAL and name the WR in bad_wr. */
static void check_post_refused(struct ibv_qp* qp, struct ibv_mr* mr,
                               uint32_t rkey, const char* name) {
  struct ibv_sge sge = sge_of(mr->addr, 64, mr->lkey);
  struct ibv_send_wr wr =
      rdma_wr(IBV_WR_RDMA_WRITE, 1, &sge, 1, (uint64_t)(uintptr_t)mr->addr,
              rkey, IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  const int r = ibv_post_send(qp, &wr, &bad);
  check(r == EINVAL && bad == &wr, name, "returned %d, bad_wr %s", r,
        bad == &wr ? "is the WR" : "is not the WR");
}

static void check_state(struct ibv_qp* qp, enum ibv_qp_state want,
                        const char* name) {
  const enum ibv_qp_state got = qp_state(qp);
  check(got == want, name, "ibv_query_qp reports state %d, expected %d", got,
        want);
}

static void t_state_machine(void) {
  step("QP state machine");
  struct side s0, s1;
  if (!make_side(&s0, &g_dev[0], &kDefaultOpts) ||
      !make_side(&s1, &g_dev[1], &kDefaultOpts)) {
    return;
  }
  uint8_t* local = pages(4096);
  uint8_t* remote = pages(4096);
  struct ibv_mr* lmr =
      reg(&g_dev[0], local, 4096, kRemoteAccess, "state: local MR");
  struct ibv_mr* rmr =
      reg(&g_dev[1], remote, 4096, kRemoteAccess, "state: remote MR");
  if (lmr == NULL || rmr == NULL) return;
  struct ibv_qp* qp = s0.qp;

  check_state(qp, IBV_QPS_RESET, "state RESET after create");
  check_post_refused(qp, lmr, rmr->rkey,
                     "ibv_post_send in RESET fails with EINVAL, bad_wr set");
  int r = to_state(qp, IBV_QPS_RTR);
  check(r == EINVAL, "RESET->RTR is refused with EINVAL", "returned %d", r);
  r = to_state(qp, IBV_QPS_RTS);
  check(r == EINVAL, "RESET->RTS is refused with EINVAL", "returned %d", r);
  check_state(qp, IBV_QPS_RESET, "still RESET after refused transitions");

  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.cur_qp_state = IBV_QPS_RTS;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  r = ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PKEY_INDEX |
                        IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  check(r == EINVAL, "a wrong IBV_QP_CUR_STATE is refused with EINVAL",
        "returned %d", r);
  check_state(qp, IBV_QPS_RESET, "still RESET after a wrong cur_qp_state");

  r = to_init(qp);
  check(r == 0, "RESET->INIT", "returned %d", r);
  check_state(qp, IBV_QPS_INIT, "state INIT");
  memset(&a, 0, sizeof(a));
  struct ibv_qp_init_attr qi;
  r = ibv_query_qp(qp, &a, IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, &qi);
  check(r == 0 && a.port_num == 1 &&
            a.qp_access_flags ==
                (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_ATOMIC),
        "ibv_query_qp reports the port and access flags set at INIT",
        "port %u access %#x", a.port_num, a.qp_access_flags);
  check_post_refused(qp, lmr, rmr->rkey,
                     "ibv_post_send in INIT fails with EINVAL, bad_wr set");
  r = to_state(qp, IBV_QPS_RTS);
  check(r == EINVAL, "INIT->RTS is refused with EINVAL", "returned %d", r);

  /* ibv_modify_qp(3): an invalid attribute changes nothing, the state
   * included. */
  rtr_attr(&a, &g_dev[1].gid, s1.qp->qp_num, 0x4242);
  a.ah_attr.is_global = 0;
  r = ibv_modify_qp(qp, &a, kRtrMask);
  check(r == EINVAL, "INIT->RTR without a GRH (RoCE) is refused with EINVAL",
        "returned %d", r);
  check_state(qp, IBV_QPS_INIT, "still INIT after a refused INIT->RTR");

  r = to_rtr(qp, &g_dev[1].gid, s1.qp->qp_num, 0x4242);
  check(r == 0, "INIT->RTR", "returned %d", r);
  check_state(qp, IBV_QPS_RTR, "state RTR");
  memset(&a, 0, sizeof(a));
  r = ibv_query_qp(qp, &a, IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_PATH_MTU,
                   &qi);
  check(r == 0 && a.dest_qp_num == s1.qp->qp_num && a.rq_psn == 0x4242 &&
            a.path_mtu == IBV_MTU_4096,
        "ibv_query_qp reports dest_qp_num, rq_psn and path_mtu set at RTR",
        "dest %u rq_psn %#x mtu %d", a.dest_qp_num, a.rq_psn, a.path_mtu);
  check_post_refused(qp, lmr, rmr->rkey,
                     "ibv_post_send in RTR fails with EINVAL, bad_wr set");
  r = to_state(qp, IBV_QPS_INIT);
  check(r == EINVAL, "RTR->INIT is refused with EINVAL", "returned %d", r);

  r = to_rts(qp, 0x4343);
  check(r == 0, "RTR->RTS", "returned %d", r);
  check_state(qp, IBV_QPS_RTS, "state RTS");
  memset(&a, 0, sizeof(a));
  r = ibv_query_qp(qp, &a, IBV_QP_SQ_PSN, &qi);
  check(r == 0 && a.sq_psn == 0x4343, "ibv_query_qp reports sq_psn set at RTS",
        "sq_psn %#x", a.sq_psn);

  /* The other end, and one WRITE across: the machine ends in a working QP. */
  r = to_init(s1.qp);
  if (r == 0) r = to_rtr(s1.qp, &g_dev[0].gid, qp->qp_num, 0x4343);
  if (r == 0) r = to_rts(s1.qp, 0x4242);
  check(r == 0, "the peer QP reaches RTS", "returned %d", r);
  fill(local, 4096, 7);
  struct ibv_sge sge = sge_of(local, 4096, lmr->lkey);
  int st = rdma_once(&s0, IBV_WR_RDMA_WRITE, 77, &sge, 1,
                     (uint64_t)(uintptr_t)remote, rmr->rkey,
                     "WRITE after RESET->INIT->RTR->RTS", NULL);
  check(st == IBV_WC_SUCCESS && first_diff(local, remote, 4096) == 4096,
        "WRITE after RESET->INIT->RTR->RTS lands", "status %s", wc_name(st));

  r = to_state(qp, IBV_QPS_ERR);
  check(r == 0, "RTS->ERR", "returned %d", r);
  check_state(qp, IBV_QPS_ERR, "state ERR");
  r = to_state(qp, IBV_QPS_RTS);
  check(r == EINVAL, "ERR->RTS is refused with EINVAL", "returned %d", r);

  /* IBA 10.3.1: in ERR a send work request completes at once, flushed,
   * signaled or not. */
  {
    struct ibv_sge esge = sge_of(local, 64, lmr->lkey);
    struct ibv_send_wr ewr =
        rdma_wr(IBV_WR_RDMA_WRITE, 78, &esge, 1, (uint64_t)(uintptr_t)remote,
                rmr->rkey, 0);
    struct ibv_send_wr* bad = NULL;
    struct ibv_wc wc;
    drain_cq(s0.cq);
    r = ibv_post_send(qp, &ewr, &bad);
    const int got = r == 0 ? wait_wcs(s0.cq, &wc, 1, 2000) : 0;
    check(r == 0 && got == 1 && wc.wr_id == 78 &&
              wc.status == IBV_WC_WR_FLUSH_ERR,
          "ibv_post_send in ERR completes flushed (unsignaled too)",
          "returned %d, %d completions, wr_id %llu status %s", r, got,
          got == 1 ? (unsigned long long)wc.wr_id : 0ULL,
          got == 1 ? wc_name(wc.status) : "-");
  }

  /* ERR -> RESET -> INIT -> RTR -> RTS reuses the queue pair, with its
   * QPN; the peer goes through RESET too, and a WRITE lands again. */
  const uint32_t qpn = qp->qp_num;
  r = to_state(qp, IBV_QPS_RESET);
  check(r == 0, "ERR->RESET", "returned %d", r);
  check_state(qp, IBV_QPS_RESET, "state RESET after ERR->RESET");
  check(qp->qp_num == qpn, "the QPN stays across RESET", "%u, was %u",
        qp->qp_num, qpn);
  /* A receive the reset flushes: its completion leaves the CQ with the
   * queue pair's other entries (IBA: in Reset the QP's CQ entries are
   * gone; mlx5 cleans them), so that a reused queue pair's first poll is
   * not an old flushed receive. */
  {
    struct ibv_sge rsge = sge_of(remote + 8192, 64, rmr->lkey);
    struct ibv_recv_wr rwr = {.wr_id = 80, .sg_list = &rsge, .num_sge = 1};
    struct ibv_recv_wr* rbad = NULL;
    check(ibv_post_recv(s1.qp, &rwr, &rbad) == 0,
          "a receive posted before RTS->RESET", "failed");
  }
  r = to_state(s1.qp, IBV_QPS_RESET);
  check(r == 0, "RTS->RESET (through ERR)", "returned %d", r);
  check_state(s1.qp, IBV_QPS_RESET, "state RESET after RTS->RESET");
  {
    struct ibv_wc wc[4];
    const int n1 = ibv_poll_cq(s1.cq, 4, wc);
    const int n0 = ibv_poll_cq(s0.cq, 4, wc);
    check(n1 == 0 && n0 == 0,
          "after RESET the queue pairs' CQs hold none of their completions "
          "(the flushed receive included)",
          "%d and %d completions left", n1, n0);
  }
  r = to_init(qp);
  if (r == 0) r = to_rtr(qp, &g_dev[1].gid, s1.qp->qp_num, 0x5151);
  if (r == 0) r = to_rts(qp, 0x5252);
  check(r == 0, "the reset QP goes RESET->INIT->RTR->RTS again", "returned %d",
        r);
  r = to_init(s1.qp);
  if (r == 0) r = to_rtr(s1.qp, &g_dev[0].gid, qp->qp_num, 0x5252);
  if (r == 0) r = to_rts(s1.qp, 0x5151);
  check(r == 0, "its reset peer too", "returned %d", r);
  fill(local, 4096, 9);
  st = rdma_once(&s0, IBV_WR_RDMA_WRITE, 79, &sge, 1,
                 (uint64_t)(uintptr_t)remote, rmr->rkey,
                 "WRITE after ERR->RESET->INIT->RTR->RTS", NULL);
  check(st == IBV_WC_SUCCESS && first_diff(local, remote, 4096) == 4096,
        "WRITE after ERR->RESET->INIT->RTR->RTS lands", "status %s",
        wc_name(st));

  /* Legal moves that are not served: the send queue drain. */
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_SQD;
  r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
  check(r == EOPNOTSUPP, "RTS->SQD is refused with EOPNOTSUPP", "returned %d",
        r);
  check_state(qp, IBV_QPS_RTS, "still RTS after a refused RTS->SQD");
  /* An attribute the move does not take is refused, as the kernel's
   * table refuses it. */
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.dest_qp_num = 5;
  r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN);
  check(r == EINVAL, "RTS->RTS with IBV_QP_DEST_QPN is refused with EINVAL",
        "returned %d", r);

  free_side(&s0);
  free_side(&s1);
  dereg(lmr);
  dereg(rmr);
}

/* ibv_modify_qp(3)'s table of the attributes each RC transition requires:
 * a transition without them, or with an invalid one, is refused. */
static void t_required_attributes(void) {
  step("QP transitions need the attributes ibv_modify_qp(3) lists");
  struct side s;
  if (!make_side(&s, &g_dev[0], &kDefaultOpts)) return;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  int r = ibv_modify_qp(s.qp, &a, IBV_QP_STATE);
  check(r == EINVAL,
        "RESET->INIT without PKEY_INDEX, PORT and ACCESS_FLAGS is refused with "
        "EINVAL",
        "returned %d, state now %d", r, qp_state(s.qp));
  free_side(&s);

  if (!make_side(&s, &g_dev[0], &kDefaultOpts)) return;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 2; /* the device has one port */
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  r = ibv_modify_qp(
      s.qp, &a,
      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  check(r == EINVAL,
        "RESET->INIT to a port that does not exist is refused with EINVAL",
        "returned %d, state now %d", r, qp_state(s.qp));
  free_side(&s);

  /* A QPN and address no QP of this test uses: nothing is ever sent. */
  if (!make_side(&s, &g_dev[0], &kDefaultOpts)) return;
  if (to_init(s.qp) == 0) {
    rtr_attr(&a, &g_dev[1].gid, 0xABCDE, 0x100);
    r = ibv_modify_qp(s.qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
    check(r == EINVAL,
          "INIT->RTR without MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER is refused "
          "with EINVAL",
          "returned %d, state now %d", r, qp_state(s.qp));
  }
  free_side(&s);

  if (!make_side(&s, &g_dev[0], &kDefaultOpts)) return;
  if (to_init(s.qp) == 0 && to_rtr(s.qp, &g_dev[1].gid, 0xABCDE, 0x100) == 0) {
    rts_attr(&a, 0x200);
    r = ibv_modify_qp(s.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    check(r == EINVAL,
          "RTR->RTS without TIMEOUT, RETRY_CNT, RNR_RETRY and MAX_QP_RD_ATOMIC "
          "is refused with EINVAL",
          "returned %d, state now %d", r, qp_state(s.qp));
  } else {
    check(false, "RTR->RTS without its required attributes",
          "could not reach RTR");
  }
  free_side(&s);
}

/* --- Data ---------------------------------------------------------------- */

enum { kBig = 4 << 20 };

struct bufs {
  uint8_t* local;  /* on rdmaplane0, kBig */
  uint8_t* local2; /* on rdmaplane0, kBig */
  uint8_t* remote; /* on rdmaplane1, kBig */
  struct ibv_mr* lmr;
  struct ibv_mr* lmr2;
  struct ibv_mr* rmr;
};

static bool make_bufs(struct bufs* b) {
  memset(b, 0, sizeof(*b));
  b->local = pages(kBig);
  b->local2 = pages(kBig);
  b->remote = pages(kBig);
  b->lmr = reg(&g_dev[0], b->local, kBig, kRemoteAccess, "local MR");
  b->lmr2 = reg(&g_dev[0], b->local2, kBig, kRemoteAccess, "second local MR");
  b->rmr = reg(&g_dev[1], b->remote, kBig, kRemoteAccess, "remote MR");
  return b->lmr != NULL && b->lmr2 != NULL && b->rmr != NULL;
}

static void free_bufs(struct bufs* b) {
  dereg(b->lmr);
  dereg(b->lmr2);
  dereg(b->rmr);
}

static uint64_t raddr(const struct bufs* b, size_t offset) {
  return (uint64_t)(uintptr_t)(b->remote + offset);
}

static void t_write_read(struct pair* p, struct bufs* b) {
  step("RDMA WRITE and READ, data checked");
  struct side* s = &p->s[0];
  struct ibv_wc wc;

  /* WRITE 4 KiB into the middle of the remote buffer. */
  memset(b->remote, 0xEE, 16384);
  fill(b->local, 4096, 1);
  struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
  int st = rdma_once(s, IBV_WR_RDMA_WRITE, 101, &sge, 1, raddr(b, 100),
                     b->rmr->rkey, "WRITE 4 KiB", &wc);
  check(st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE &&
            wc.qp_num == s->qp->qp_num,
        "WRITE 4 KiB completes: success, opcode RDMA_WRITE, its QP",
        "status %s opcode %d qp_num %u", wc_name(st), wc.opcode, wc.qp_num);
  check(first_diff(b->local, b->remote + 100, 4096) == 4096 &&
            all_bytes(b->remote, 100, 0xEE) &&
            all_bytes(b->remote + 4196, 16384 - 4196, 0xEE),
        "WRITE 4 KiB: the bytes landed, and only those",
        "first difference at %zu", first_diff(b->local, b->remote + 100, 4096));

  /* READ 64 KiB from an odd offset. */
  fill(b->remote, 200000, 2);
  memset(b->local2, 0, 65536);
  sge = sge_of(b->local2, 65536, b->lmr2->lkey);
  st = rdma_once(s, IBV_WR_RDMA_READ, 102, &sge, 1, raddr(b, 12345),
                 b->rmr->rkey, "READ 64 KiB", &wc);
  check(st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ &&
            wc.byte_len == 65536,
        "READ 64 KiB completes: success, opcode RDMA_READ, byte_len",
        "status %s opcode %d byte_len %u", wc_name(st), wc.opcode, wc.byte_len);
  check(first_diff(b->remote + 12345, b->local2, 65536) == 65536,
        "READ 64 KiB: the bytes arrived", "first difference at %zu",
        first_diff(b->remote + 12345, b->local2, 65536));

  /* 4 MiB each way. */
  fill(b->local, kBig, 3);
  sge = sge_of(b->local, kBig, b->lmr->lkey);
  st = rdma_once(s, IBV_WR_RDMA_WRITE, 103, &sge, 1, raddr(b, 0), b->rmr->rkey,
                 "WRITE 4 MiB", NULL);
  check(st == IBV_WC_SUCCESS && first_diff(b->local, b->remote, kBig) == kBig,
        "WRITE 4 MiB lands whole", "status %s, first difference at %zu",
        wc_name(st), first_diff(b->local, b->remote, kBig));
  fill(b->remote, kBig, 4);
  memset(b->local2, 0, kBig);
  sge = sge_of(b->local2, kBig, b->lmr2->lkey);
  st = rdma_once(s, IBV_WR_RDMA_READ, 104, &sge, 1, raddr(b, 0), b->rmr->rkey,
                 "READ 4 MiB", &wc);
  check(st == IBV_WC_SUCCESS && wc.byte_len == kBig &&
            first_diff(b->remote, b->local2, kBig) == kBig,
        "READ 4 MiB arrives whole",
        "status %s byte_len %u, first difference at %zu", wc_name(st),
        wc.byte_len, first_diff(b->remote, b->local2, kBig));

  /* 16 SGEs (max_sge) gathered by a WRITE, of odd lengths, from two MRs. */
  enum { kSges = 16 };
  static const uint32_t kLen[kSges] = {1,    7,  4096, 13,   3000, 65536,
                                       2,    999, 5,   8192, 17,   1,
                                       4095, 33, 20000, 3};
  static const uint32_t kOff[kSges] = {
      0,      11,     5000,   40,     70001,  100000, 300000, 999,
      400000, 200000, 500000, 250000, 600000, 350000, 700000, 450000};
  struct ibv_sge sges[kSges];
  uint8_t* expect = pages(1 << 20);
  fill(b->local, kBig, 5);
  fill(b->local2, kBig, 6);
  size_t total = 0;
  for (int i = 0; i < kSges; ++i) {
    uint8_t* from = (i % 2 == 0 ? b->local : b->local2) + kOff[i];
    sges[i] = sge_of(from, kLen[i], i % 2 == 0 ? b->lmr->lkey : b->lmr2->lkey);
    memcpy(expect + total, from, kLen[i]);
    total += kLen[i];
  }
  memset(b->remote, 0, total + 64);
  const int max_sge = (int)(p->s[0].cap.max_send_sge < kSges
                                ? p->s[0].cap.max_send_sge
                                : kSges);
  st = rdma_once(s, IBV_WR_RDMA_WRITE, 105, sges, max_sge, raddr(b, 33),
                 b->rmr->rkey, "WRITE gathering 16 SGEs", NULL);
  size_t want = 0;
  for (int i = 0; i < max_sge; ++i) want += kLen[i];
  check(max_sge == kSges && st == IBV_WC_SUCCESS &&
            first_diff(expect, b->remote + 33, want) == want &&
            all_bytes(b->remote + 33 + want, 31, 0),
        "WRITE gathering 16 SGEs lands as their concatenation",
        "max_send_sge %d status %s first difference at %zu", max_sge,
        wc_name(st), first_diff(expect, b->remote + 33, want));

  /* 16 SGEs scattered by a READ. */
  fill(b->remote, total, 7);
  memset(b->local, 0, kBig);
  memset(b->local2, 0, kBig);
  st = rdma_once(s, IBV_WR_RDMA_READ, 106, sges, max_sge, raddr(b, 0),
                 b->rmr->rkey, "READ scattering 16 SGEs", &wc);
  size_t at = 0, bad_sge = kSges;
  for (int i = 0; i < max_sge; ++i) {
    const uint8_t* to = (i % 2 == 0 ? b->local : b->local2) + kOff[i];
    if (first_diff(b->remote + at, to, kLen[i]) != kLen[i] && bad_sge == kSges)
      bad_sge = (size_t)i;
    at += kLen[i];
  }
  check(st == IBV_WC_SUCCESS && bad_sge == kSges && wc.byte_len == want,
        "READ scattering 16 SGEs fills each in order",
        "status %s, byte_len %u, SGE %zu differs", wc_name(st), wc.byte_len,
        bad_sge);

  /* IBV_SEND_FENCE: a WRITE sending the buffer a READ before it fills
   * waits for the READ, and sends what it brought. */
  fill(b->remote, 65536, 25);
  memset(b->remote + 65536, 0, 65536);
  memset(b->local, 0, 65536);
  struct ibv_sge fsge[2] = {sge_of(b->local, 65536, b->lmr->lkey),
                            sge_of(b->local, 65536, b->lmr->lkey)};
  struct ibv_send_wr fwr[2] = {
      rdma_wr(IBV_WR_RDMA_READ, 107, &fsge[0], 1, raddr(b, 0), b->rmr->rkey,
              IBV_SEND_SIGNALED),
      rdma_wr(IBV_WR_RDMA_WRITE, 108, &fsge[1], 1, raddr(b, 65536),
              b->rmr->rkey, IBV_SEND_SIGNALED | IBV_SEND_FENCE)};
  fwr[0].next = &fwr[1];
  struct ibv_send_wr* fbad = NULL;
  int fr = ibv_post_send(s->qp, &fwr[0], &fbad);
  struct ibv_wc fwc[2];
  int fgot = fr == 0 ? wait_wcs(s->cq, fwc, 2, 10000) : 0;
  check(fr == 0 && fgot == 2 && fwc[0].wr_id == 107 && fwc[1].wr_id == 108 &&
            fwc[0].status == IBV_WC_SUCCESS &&
            fwc[1].status == IBV_WC_SUCCESS &&
            first_diff(b->remote, b->remote + 65536, 65536) == 65536,
        "a FENCE'd WRITE after a READ sends the data the READ brought",
        "post %d, %d completions, first difference at %zu", fr, fgot,
        first_diff(b->remote, b->remote + 65536, 65536));

  /* A WRITE without data (num_sge 0) is a valid RDMA WRITE. */
  memset(b->remote, 0x77, 64);
  st = rdma_once(s, IBV_WR_RDMA_WRITE, 109, NULL, 0, raddr(b, 0), b->rmr->rkey,
                 "WRITE of 0 bytes", &wc);
  check(st == IBV_WC_SUCCESS && all_bytes(b->remote, 64, 0x77),
        "a WRITE of 0 bytes (num_sge 0) completes and changes nothing",
        "status %s", wc_name(st));

  /* Completions come in posting order; ibv_poll_cq returns at most
   * num_entries, the rest stay. */
  struct ibv_sge four[4];
  struct ibv_send_wr wrs[4];
  fill(b->local, 4 * 1024, 8);
  for (int i = 0; i < 4; ++i) {
    four[i] = sge_of(b->local + i * 1024, 1024, b->lmr->lkey);
    wrs[i] =
        rdma_wr(IBV_WR_RDMA_WRITE, 200 + (uint64_t)i, &four[i], 1,
                raddr(b, (size_t)i * 1024), b->rmr->rkey, IBV_SEND_SIGNALED);
    wrs[i].next = i < 3 ? &wrs[i + 1] : NULL;
  }
  struct ibv_send_wr* bad = NULL;
  int r = ibv_post_send(s->qp, &wrs[0], &bad);
  struct ibv_wc w4[4];
  int got = r == 0 ? wait_wcs(s->cq, w4, 1, 10000) : 0;
  /* Let the other three complete before asking for them. */
  sleep_us(100000);
  if (got == 1) got += wait_wcs(s->cq, w4 + 1, 3, 10000);
  bool in_order = got == 4;
  for (int i = 0; i < got; ++i) {
    if (w4[i].wr_id != 200 + (uint64_t)i || w4[i].status != IBV_WC_SUCCESS)
      in_order = false;
  }
  check(r == 0 && in_order && first_diff(b->local, b->remote, 4096) == 4096,
        "a list of 4 WRITEs completes in posting order",
        "post %d, %d completions", r, got);
  check(extra_wcs(s->cq, 100) == 0, "no completion beyond those posted",
        "extra completions");
}

static void t_unaligned(struct pair* p, struct bufs* b) {
  step("unaligned malloc and anonymous mmap buffers");
  struct side* s = &p->s[0];

  /* A malloc buffer at an odd address, as source of a WRITE and target of a
   * READ on rdmaplane0. Its contents, and the bytes around it, survive the
   * registration. */
  const size_t len = 150001;
  uint8_t* raw = malloc(len + 64);
  uint8_t* u = raw + 3;
  memset(raw, 0xA5, len + 64);
  fill(u, len, 9);
  /* Not malloc'd: freeing a block the registration's window moved would
   * unmap moved pages, whose addresses no later registration of this
   * context may use (docs/verbs.md). */
  uint8_t* copy = pages(len);
  memcpy(copy, u, len);
  struct ibv_mr* umr =
      reg(&g_dev[0], u, len, IBV_ACCESS_LOCAL_WRITE, "unaligned malloc MR");
  if (umr != NULL) {
    check(first_diff(copy, u, len) == len && all_bytes(raw, 3, 0xA5) &&
              all_bytes(u + len, 61, 0xA5),
          "ibv_reg_mr keeps an unaligned malloc buffer's contents and its "
          "neighbours",
          "first difference at %zu", first_diff(copy, u, len));
    memset(b->remote, 0, len + 16);
    struct ibv_sge sge = sge_of(u, (uint32_t)len, umr->lkey);
    int st =
        rdma_once(s, IBV_WR_RDMA_WRITE, 301, &sge, 1, raddr(b, 5), b->rmr->rkey,
                  "WRITE from an unaligned malloc buffer", NULL);
    check(st == IBV_WC_SUCCESS && first_diff(u, b->remote + 5, len) == len,
          "WRITE from an unaligned malloc buffer",
          "status %s first difference at %zu", wc_name(st),
          first_diff(u, b->remote + 5, len));
    fill(b->remote, len + 16, 10);
    st = rdma_once(s, IBV_WR_RDMA_READ, 302, &sge, 1, raddr(b, 1), b->rmr->rkey,
                   "READ into an unaligned malloc buffer", NULL);
    check(st == IBV_WC_SUCCESS && first_diff(b->remote + 1, u, len) == len &&
              all_bytes(raw, 3, 0xA5) && all_bytes(u + len, 61, 0xA5),
          "READ into an unaligned malloc buffer, neighbours untouched",
          "status %s first difference at %zu", wc_name(st),
          first_diff(b->remote + 1, u, len));
    dereg(umr);
  }

  /* A small buffer at an odd address, with other data on its pages, as
   * the remote target on rdmaplane1 only. Not from malloc: which heap pages
   * the registrations through rdmaplane0 moved depends on where malloc put
   * this process's other data, and a page serves one device at a time
   * (docs/verbs.md), so a heap buffer here would pass or fail by the heap's
   * layout. */
  uint8_t* small_raw = pages(8192);
  uint8_t* small = small_raw + 1;
  memset(small_raw, 0x3C, 5000);
  struct ibv_mr* smr =
      reg(&g_dev[1], small, 4001, kRemoteAccess, "small unaligned MR");
  if (smr != NULL) {
    fill(b->local, 4001, 11);
    struct ibv_sge sge = sge_of(b->local, 4001, b->lmr->lkey);
    int st = rdma_once(s, IBV_WR_RDMA_WRITE, 303, &sge, 1,
                       (uint64_t)(uintptr_t)small, smr->rkey,
                       "WRITE into an unaligned heap buffer", NULL);
    check(st == IBV_WC_SUCCESS && first_diff(b->local, small, 4001) == 4001 &&
              small_raw[0] == 0x3C &&
              all_bytes(small + 4001, 5000 - 4002, 0x3C),
          "WRITE into an unaligned heap buffer lands, neighbours untouched",
          "status %s first difference at %zu", wc_name(st),
          first_diff(b->local, small, 4001));
    dereg(smr);
  }

  /* An anonymous mmap region filled before registration, as the remote
   * buffer: READ sees what it held, WRITE changes what the process sees. */
  const size_t mlen = 2u << 20;
  uint8_t* m = mmap(NULL, mlen, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  fill(m, mlen, 12);
  struct ibv_mr* mmr =
      reg(&g_dev[1], m, mlen, kRemoteAccess, "anonymous mmap MR");
  if (mmr != NULL) {
    memset(b->local2, 0, mlen);
    struct ibv_sge sge = sge_of(b->local2, (uint32_t)mlen, b->lmr2->lkey);
    int st =
        rdma_once(s, IBV_WR_RDMA_READ, 304, &sge, 1, (uint64_t)(uintptr_t)m,
                  mmr->rkey, "READ from an anonymous mmap buffer", NULL);
    check(st == IBV_WC_SUCCESS && first_diff(m, b->local2, mlen) == mlen,
          "READ from an anonymous mmap buffer sees what it held before "
          "ibv_reg_mr",
          "status %s first difference at %zu", wc_name(st),
          first_diff(m, b->local2, mlen));
    fill(b->local, 100000, 13);
    sge = sge_of(b->local, 100000, b->lmr->lkey);
    st = rdma_once(s, IBV_WR_RDMA_WRITE, 305, &sge, 1,
                   (uint64_t)(uintptr_t)(m + 4093), mmr->rkey,
                   "WRITE into an anonymous mmap buffer", NULL);
    check(st == IBV_WC_SUCCESS &&
              first_diff(b->local, m + 4093, 100000) == 100000,
          "WRITE into an anonymous mmap buffer is seen by the process",
          "status %s first difference at %zu", wc_name(st),
          first_diff(b->local, m + 4093, 100000));
    dereg(mmr);
  }
}

/* ibv_post_send(3): processing stops at the first WR that fails, which
 * bad_wr names; those before it were posted. */
static void t_bad_wr_in_list(struct pair* p, struct bufs* b) {
  step("a list with a bad WR in the middle");
  struct side* s = &p->s[0];
  memset(b->remote, 0, 16384);
  fill(b->local, 16384, 14);
  struct ibv_sge sg[4], many[9];
  for (int i = 0; i < 9; ++i)
    many[i] = sge_of(b->local + 8192 + i * 8, 8, b->lmr->lkey);
  struct ibv_send_wr wrs[4];
  for (int i = 0; i < 4; ++i) {
    sg[i] = sge_of(b->local + i * 2048, 2048, b->lmr->lkey);
    wrs[i] =
        rdma_wr(IBV_WR_RDMA_WRITE, 400 + (uint64_t)i, &sg[i], 1,
                raddr(b, (size_t)i * 2048), b->rmr->rkey, IBV_SEND_SIGNALED);
    wrs[i].next = i < 3 ? &wrs[i + 1] : NULL;
  }
  /* The third has more SGEs than the QP allows. */
  wrs[2].sg_list = many;
  wrs[2].num_sge = (int)s->cap.max_send_sge + 1;
  struct ibv_send_wr* bad = NULL;
  int r = ibv_post_send(s->qp, &wrs[0], &bad);
  check(r != 0 && bad == &wrs[2],
        "a WR with num_sge > max_send_sge fails the post; bad_wr names it",
        "returned %d, bad_wr is WR %d", r, bad == NULL ? -1 : (int)(bad - wrs));
  check(r == EINVAL, "a WR with too many SGEs is refused with EINVAL",
        "returned %d", r);
  struct ibv_wc wc[4];
  int got = wait_wcs(s->cq, wc, 2, 10000);
  check(got == 2 && wc[0].wr_id == 400 && wc[1].wr_id == 401 &&
            wc[0].status == IBV_WC_SUCCESS && wc[1].status == IBV_WC_SUCCESS,
        "the WRs before the bad one complete", "%d completions", got);
  check(extra_wcs(s->cq, 200) == 0,
        "the bad WR and those after it do not complete", "extra completions");
  check(first_diff(b->local, b->remote, 4096) == 4096 &&
            all_bytes(b->remote + 4096, 4096, 0),
        "the WRs before the bad one wrote, those from it on did not",
        "remote differs");

  /* The same with an opcode that is not served in the middle. */
  memset(b->remote, 0, 16384);
  for (int i = 0; i < 4; ++i) {
    wrs[i] =
        rdma_wr(IBV_WR_RDMA_WRITE, 410 + (uint64_t)i, &sg[i], 1,
                raddr(b, (size_t)i * 2048), b->rmr->rkey, IBV_SEND_SIGNALED);
    wrs[i].next = i < 3 ? &wrs[i + 1] : NULL;
  }
  wrs[1].opcode = IBV_WR_TSO;
  bad = NULL;
  r = ibv_post_send(s->qp, &wrs[0], &bad);
  check(r == EOPNOTSUPP && bad == &wrs[1],
        "IBV_WR_TSO is refused with EOPNOTSUPP; bad_wr names it",
        "returned %d, bad_wr is WR %d", r, bad == NULL ? -1 : (int)(bad - wrs));
  got = wait_wcs(s->cq, wc, 1, 10000);
  check(got == 1 && wc[0].wr_id == 410 && wc[0].status == IBV_WC_SUCCESS &&
            extra_wcs(s->cq, 200) == 0,
        "the WR before the unserved one completes, nothing else",
        "%d completions", got);
}

static void t_unsignaled(struct bufs* b) {
  step("unsignaled WRs");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  if (connect_pair(&p, &o, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    memset(b->remote, 0, 16384);
    fill(b->local, 16384, 15);
    struct ibv_sge sg[4];
    struct ibv_send_wr wrs[4];
    for (int i = 0; i < 4; ++i) {
      sg[i] = sge_of(b->local + i * 4096, 4096, b->lmr->lkey);
      wrs[i] = rdma_wr(IBV_WR_RDMA_WRITE, 500 + (uint64_t)i, &sg[i], 1,
                       raddr(b, (size_t)i * 4096), b->rmr->rkey,
                       i == 3 ? IBV_SEND_SIGNALED : 0);
      wrs[i].next = i < 3 ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &wrs[0], &bad);
    struct ibv_wc wc;
    int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
    check(r == 0 && got == 1 && wc.wr_id == 503 && wc.status == IBV_WC_SUCCESS,
          "3 unsignaled WRITEs and a signaled one: the signaled one completes",
          "post %d, %d completions, first wr_id %llu", r, got,
          got ? (unsigned long long)wc.wr_id : 0ull);
    check(extra_wcs(s->cq, 200) == 0, "the unsignaled WRITEs do not complete",
          "extra completions");
    check(first_diff(b->local, b->remote, 16384) == 16384,
          "all 4 WRITEs landed", "first difference at %zu",
          first_diff(b->local, b->remote, 16384));
    /* Many more unsignaled ones than the send queue holds, one signaled
     * now and then: the queue never fills. */
    int failed_post = 0;
    for (int i = 0; i < 4 * (int)s->cap.max_send_wr && failed_post == 0; ++i) {
      const bool sig = i % 16 == 15;
      struct ibv_send_wr w =
          rdma_wr(IBV_WR_RDMA_WRITE, 600 + (uint64_t)i, &sg[0], 1, raddr(b, 0),
                  b->rmr->rkey, sig ? IBV_SEND_SIGNALED : 0);
      failed_post = ibv_post_send(s->qp, &w, &bad);
      if (sig && failed_post == 0 && wait_wcs(s->cq, &wc, 1, 10000) != 1)
        failed_post = -1;
    }
    check(failed_post == 0,
          "4 x max_send_wr WRITEs, every 16th signaled and reaped, all post",
          "a post or wait failed: %d", failed_post);
  }
  free_pair(&p);

  /* sq_sig_all: every WR completes, SIGNALED or not. */
  struct qp_opts all = kDefaultOpts;
  all.sq_sig_all = 1;
  if (connect_pair(&p, &all, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    struct ibv_sge sge = sge_of(b->local, 64, b->lmr->lkey);
    struct ibv_send_wr w =
        rdma_wr(IBV_WR_RDMA_WRITE, 700, &sge, 1, raddr(b, 0), b->rmr->rkey, 0);
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &w, &bad);
    struct ibv_wc wc;
    int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
    check(got == 1 && wc.wr_id == 700 && wc.status == IBV_WC_SUCCESS,
          "with sq_sig_all a WR without IBV_SEND_SIGNALED completes",
          "post %d, %d completions", r, got);
  }
  free_pair(&p);
}

static void t_inline(struct bufs* b) {
  step("inline WRITE");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.max_inline_data = 64;
  if (!connect_pair(&p, &o, &kDefaultOpts)) {
    free_pair(&p);
    return;
  }
  struct side* s = &p.s[0];
  const uint32_t max_inline = s->cap.max_inline_data;
  check(max_inline >= 64, "ibv_create_qp grants max_inline_data asked for",
        "max_inline_data %u", max_inline);

  /* From the stack, unregistered, lkey 0; reusable once posted. */
  uint8_t stack[64];
  uint8_t want[64];
  fill(stack, sizeof(stack), 16);
  memcpy(want, stack, sizeof(want));
  memset(b->remote, 0, 256);
  struct ibv_sge sge = sge_of(stack, sizeof(stack), 0);
  struct ibv_send_wr w =
      rdma_wr(IBV_WR_RDMA_WRITE, 800, &sge, 1, raddr(b, 7), b->rmr->rkey,
              IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  struct ibv_send_wr* bad = NULL;
  int r = ibv_post_send(s->qp, &w, &bad);
  memset(stack, 0, sizeof(stack)); /* ibv_post_send(3): reusable at once */
  struct ibv_wc wc;
  int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
  check(r == 0 && got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 800 &&
            first_diff(want, b->remote + 7, 64) == 64 &&
            all_bytes(b->remote, 7, 0) && all_bytes(b->remote + 71, 100, 0),
        "inline WRITE of 64 bytes from an unregistered stack buffer, lkey 0",
        "post %d, %d completions, status %s", r, got,
        got ? wc_name(wc.status) : "none");

  /* Two SGEs inline. */
  uint8_t part1[20], part2[30];
  fill(part1, sizeof(part1), 17);
  fill(part2, sizeof(part2), 18);
  struct ibv_sge two[2] = {sge_of(part1, 20, 0), sge_of(part2, 30, 0)};
  memset(b->remote, 0, 256);
  w = rdma_wr(IBV_WR_RDMA_WRITE, 801, two, 2, raddr(b, 0), b->rmr->rkey,
              IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  r = ibv_post_send(s->qp, &w, &bad);
  got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
  check(r == 0 && got == 1 && wc.status == IBV_WC_SUCCESS &&
            first_diff(part1, b->remote, 20) == 20 &&
            first_diff(part2, b->remote + 20, 30) == 30,
        "inline WRITE gathering 2 stack SGEs", "post %d, %d completions", r,
        got);

  /* More than max_inline_data: refused at the post. */
  uint8_t* big = calloc(1, max_inline + 1);
  sge = sge_of(big, max_inline + 1, 0);
  w = rdma_wr(IBV_WR_RDMA_WRITE, 802, &sge, 1, raddr(b, 0), b->rmr->rkey,
              IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  bad = NULL;
  r = ibv_post_send(s->qp, &w, &bad);
  check(r != 0 && bad == &w,
        "inline WRITE of max_inline_data + 1 bytes is refused", "returned %d",
        r);
  check(extra_wcs(s->cq, 100) == 0,
        "the refused inline WRITE does not complete", "extra completions");
  free(big);
  free_pair(&p);
}

static void t_max_send_wr(struct bufs* b) {
  step("a full send queue");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.max_send_wr = 4;
  if (connect_pair(&p, &o, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    const int n = (int)s->cap.max_send_wr;
    struct ibv_sge sge = sge_of(b->local, 1024, b->lmr->lkey);
    struct ibv_send_wr* wrs = calloc((size_t)n + 1, sizeof(*wrs));
    for (int i = 0; i <= n; ++i) {
      wrs[i] = rdma_wr(IBV_WR_RDMA_WRITE, 900 + (uint64_t)i, &sge, 1,
                       raddr(b, 0), b->rmr->rkey, IBV_SEND_SIGNALED);
      wrs[i].next = i < n ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &wrs[0], &bad);
    check(r == ENOMEM && bad == &wrs[n],
          "max_send_wr + 1 outstanding WRs: the last is refused with ENOMEM",
          "max_send_wr %d: returned %d, bad_wr is WR %d", n, r,
          bad == NULL ? -1 : (int)(bad - wrs));
    struct ibv_wc wc[64];
    int got = wait_wcs(s->cq, wc, n, 10000);
    check(got == n && extra_wcs(s->cq, 100) == 0,
          "the first max_send_wr complete", "%d of %d", got, n);
    wrs[0].next = NULL;
    r = ibv_post_send(s->qp, &wrs[0], &bad);
    got = r == 0 ? wait_wcs(s->cq, wc, 1, 10000) : 0;
    check(r == 0 && got == 1, "once reaped, the queue takes WRs again",
          "post %d, %d completions", r, got);
    free(wrs);
  }
  free_pair(&p);
}

/* Queues as deep as a device's (ibv_query_device(3): max_qp_wr and
 * max_srq_wr at least 4096, as issue-level limits ask): a queue pair made
 * with max_send_wr and max_recv_wr of max_qp_wr holds that many requests
 * at once. Every receive is posted, then every SEND, before anything is
 * polled; one more of either is refused with ENOMEM; all complete, in
 * order, each SEND's bytes in its receive. */
static void t_deep_queues(struct bufs* b) {
  step("queues of max_qp_wr requests");
  struct ibv_device_attr da;
  if (ibv_query_device(g_dev[0].ctx, &da) != 0) {
    check(false, "ibv_query_device", "errno %d", errno);
    return;
  }
  check(da.max_qp_wr >= 4096 && da.max_srq_wr >= 4096 && da.max_srq >= 1 &&
            da.max_srq_sge >= 1 && da.max_cqe >= 65535,
        "ibv_query_device: max_qp_wr and max_srq_wr at least 4096, "
        "max_cqe at least 65535, max_srq and max_srq_sge set",
        "max_qp_wr %d max_srq_wr %d max_srq %d max_srq_sge %d max_cqe %d",
        da.max_qp_wr, da.max_srq_wr, da.max_srq, da.max_srq_sge, da.max_cqe);
  const int depth = da.max_qp_wr;
  const uint32_t kMsg = 16;
  if ((size_t)depth * kMsg > kBig) return;
  struct qp_opts o = kDefaultOpts;
  o.max_send_wr = (uint32_t)depth;
  o.max_send_sge = 1;
  o.max_recv_wr = (uint32_t)depth;
  o.cqe = 2 * depth;
  struct pair p;
  if (!connect_pair(&p, &o, &o)) {
    free_pair(&p);
    return;
  }
  struct side* tx = &p.s[0];
  struct side* rx = &p.s[1];
  fill(b->local, (size_t)depth * kMsg, 41);
  memset(b->remote, 0, (size_t)depth * kMsg);
  int r = 0;
  int posted = 0;
  for (; posted < depth && r == 0; ++posted) {
    struct ibv_sge sge =
        sge_of(b->remote + (size_t)posted * kMsg, kMsg, b->rmr->lkey);
    struct ibv_recv_wr wr = {.wr_id = 5000 + (uint64_t)posted,
                             .sg_list = &sge,
                             .num_sge = 1};
    struct ibv_recv_wr* bad = NULL;
    r = ibv_post_recv(rx->qp, &wr, &bad);
  }
  check(r == 0, "max_qp_wr receives posted at once", "receive %d: %d",
        posted - 1, r);
  {
    struct ibv_sge sge = sge_of(b->remote, kMsg, b->rmr->lkey);
    struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr* bad = NULL;
    r = ibv_post_recv(rx->qp, &wr, &bad);
    check(r == ENOMEM, "one receive more is refused with ENOMEM",
          "returned %d", r);
  }
  r = 0;
  int sent = 0;
  for (; sent < depth && r == 0; ++sent) {
    struct ibv_sge sge =
        sge_of(b->local + (size_t)sent * kMsg, kMsg, b->lmr->lkey);
    struct ibv_send_wr wr = {.wr_id = 9000 + (uint64_t)sent,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr* bad = NULL;
    r = ibv_post_send(tx->qp, &wr, &bad);
  }
  check(r == 0, "max_qp_wr SENDs posted at once", "SEND %d: %d", sent - 1,
        r);
  {
    struct ibv_sge sge = sge_of(b->local, kMsg, b->lmr->lkey);
    struct ibv_send_wr wr = {.wr_id = 1,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr* bad = NULL;
    r = ibv_post_send(tx->qp, &wr, &bad);
    check(r == ENOMEM, "one SEND more is refused with ENOMEM", "returned %d",
          r);
  }
  struct ibv_wc* wc = calloc((size_t)depth, sizeof(*wc));
  if (wc == NULL) {
    free_pair(&p);
    return;
  }
  int got = wait_wcs(tx->cq, wc, depth, 60000);
  int in_order = 0;
  for (int i = 0; i < got; ++i) {
    in_order += wc[i].wr_id == 9000 + (uint64_t)i &&
                wc[i].status == IBV_WC_SUCCESS && wc[i].opcode == IBV_WC_SEND;
  }
  check(got == depth && in_order == depth,
        "every SEND completes, in order", "%d of %d, %d in order", got, depth,
        in_order);
  got = wait_wcs(rx->cq, wc, depth, 60000);
  in_order = 0;
  for (int i = 0; i < got; ++i) {
    in_order += wc[i].wr_id == 5000 + (uint64_t)i &&
                wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == kMsg;
  }
  check(got == depth && in_order == depth &&
            first_diff(b->local, b->remote, (size_t)depth * kMsg) ==
                (size_t)depth * kMsg,
        "every receive completes, in order, with its SEND's bytes",
        "%d of %d, %d in order, first difference at byte %zu", got, depth,
        in_order, first_diff(b->local, b->remote, (size_t)depth * kMsg));
  free(wc);
  free_pair(&p);
}

/* Queue pairs deeper than 4096 requests take one of an opened device's 32
 * deep slots (docs/verbs.md, "Limits"): the 33rd at once fails with
 * ENOMEM, while one of ordinary depth is still made; once a deep one is
 * destroyed, its slot serves the next. */
static void t_deep_slots(void) {
  step("queue pairs deeper than 4096 requests: 32 per opened device");
  struct ibv_device_attr da;
  if (ibv_query_device(g_dev[0].ctx, &da) != 0) {
    check(false, "ibv_query_device", "errno %d", errno);
    return;
  }
  check(da.max_qp_wr >= 16384, "ibv_query_device: max_qp_wr at least 16384",
        "max_qp_wr %d", da.max_qp_wr);
  struct ibv_cq* cq = ibv_create_cq(g_dev[0].ctx, 64, NULL, NULL, 0);
  if (cq == NULL) {
    check(false, "ibv_create_cq", "errno %d", errno);
    return;
  }
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 16;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  struct ibv_qp* deep[40] = {NULL};
  int made = 0;
  int err = 0;
  for (; made < 40; ++made) {
    struct ibv_qp_init_attr a = init;
    a.cap.max_recv_wr = made % 2 == 0 ? 8192 : 4097;
    deep[made] = ibv_create_qp(g_dev[0].pd, &a);
    if (deep[made] == NULL) {
      err = errno;
      break;
    }
  }
  check(made == 32 && err == ENOMEM,
        "32 queue pairs of 4097 receives or more are made, the 33rd fails "
        "with ENOMEM",
        "%d made, then errno %d", made, err);
  struct ibv_qp_init_attr a = init;
  a.cap.max_recv_wr = 4096;
  struct ibv_qp* shallow = ibv_create_qp(g_dev[0].pd, &a);
  check(shallow != NULL, "a queue pair of 4096 receives is still made",
        "errno %d", errno);
  if (shallow != NULL) ibv_destroy_qp(shallow);
  if (made > 0) {
    ibv_destroy_qp(deep[--made]);
    a.cap.max_recv_wr = 16384;
    a.cap.max_send_wr = 16384;
    deep[made] = ibv_create_qp(g_dev[0].pd, &a);
    check(deep[made] != NULL && a.cap.max_recv_wr >= 16384 &&
              a.cap.max_send_wr >= 16384,
          "a destroyed deep queue pair's slot serves the next, 16384 deep",
          "errno %d", errno);
    if (deep[made] != NULL) ++made;
  }
  while (made > 0) ibv_destroy_qp(deep[--made]);
  ibv_destroy_cq(cq);
}

/* A receive posted on memory that is deregistered before a message comes
 * (ibv_dereg_mr(3), IBA 9.9.3.1.3): nothing lands there, the receive ends
 * with IBV_WC_LOC_PROT_ERR and the sender's SEND with IBV_WC_REM_OP_ERR
 * (NAK "remote operational error"). The buffer is freed in between, as an
 * application may once its MR is gone. */
static void t_receive_after_dereg(struct bufs* b) {
  step("a receive whose memory was deregistered after it was posted");
  struct pair p;
  if (!connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    free_pair(&p);
    return;
  }
  struct side* tx = &p.s[0];
  struct side* rx = &p.s[1];
  enum { kLen = 256 };
  uint8_t* buf = pages(4096);
  memset(buf, 0x5A, 4096);
  struct ibv_mr* mr = reg(rx->dev, buf, 4096, IBV_ACCESS_LOCAL_WRITE,
                          "receive MR");
  if (mr == NULL) {
    free_pair(&p);
    return;
  }
  struct ibv_sge rsge = sge_of(buf, kLen, mr->lkey);
  struct ibv_recv_wr rwr = {.wr_id = 77, .sg_list = &rsge, .num_sge = 1};
  struct ibv_recv_wr* rbad = NULL;
  check(ibv_post_recv(rx->qp, &rwr, &rbad) == 0, "ibv_post_recv", "failed");
  check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr with a receive posted on it",
        "errno %d", errno);
  fill(b->local, kLen, 91);
  struct ibv_sge sge = sge_of(b->local, kLen, b->lmr->lkey);
  struct ibv_send_wr wr = {.wr_id = 78,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  struct ibv_wc wc;
  const int status = post_once(tx, &wr, "SEND into deregistered memory", &wc);
  check(status == IBV_WC_REM_OP_ERR,
        "the SEND ends with IBV_WC_REM_OP_ERR", "status %d (%s)", status,
        ibv_wc_status_str((enum ibv_wc_status)status));
  struct ibv_wc rwc;
  memset(&rwc, 0, sizeof(rwc));
  const int got = wait_wcs(rx->cq, &rwc, 1, 10000);
  check(got == 1 && rwc.wr_id == 77 && rwc.status == IBV_WC_LOC_PROT_ERR,
        "the receive ends with IBV_WC_LOC_PROT_ERR",
        "%d completions, wr_id %llu status %d (%s)", got,
        (unsigned long long)rwc.wr_id, rwc.status,
        ibv_wc_status_str(rwc.status));
  size_t changed = 0;
  while (changed < 4096 && buf[changed] == 0x5A) ++changed;
  check(changed == 4096, "nothing landed in the buffer",
        "byte %zu changed", changed);
  munmap(buf, 4096 + 4096);  /* with pages()' guard page */
  free_pair(&p);
}

/* An lkey is its protection domain's: a queue pair may not name an MR of
 * another PD of the same context. A WRITE from one fails with
 * IBV_WC_LOC_PROT_ERR (or is refused at the post) and moves nothing.
 * (rdma_core_tests_test's test_mr_rereg_pd covers a receive.) */
static void t_lkey_of_another_pd(struct bufs* b) {
  step("an lkey of another protection domain");
  struct ibv_pd* other = ibv_alloc_pd(g_dev[0].ctx);
  if (!check(other != NULL, "a second PD", "errno %d", errno)) return;
  uint8_t* buf = pages(4096);
  memset(buf, 0x6B, 4096);
  struct ibv_mr* mr = ibv_reg_mr(other, buf, 4096, kRemoteAccess);
  struct pair p;
  if (check(mr != NULL, "an MR in the second PD", "errno %d", errno) &&
      connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    memset(b->remote, 0, 4096);
    struct ibv_sge sge = sge_of(buf, 4096, mr->lkey);
    struct ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 1300, &sge, 1,
                                   raddr(b, 0), b->rmr->rkey,
                                   IBV_SEND_SIGNALED);
    struct ibv_send_wr* bad = NULL;
    const int r = ibv_post_send(p.s[0].qp, &w, &bad);
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    const int got = r == 0 ? wait_wcs(p.s[0].cq, &wc, 1, 10000) : 0;
    check((r != 0 && bad == &w) ||
              (got == 1 && wc.wr_id == 1300 &&
               wc.status == IBV_WC_LOC_PROT_ERR),
          "a WRITE from an MR of another PD is refused or completes with "
          "IBV_WC_LOC_PROT_ERR",
          "post %d, %d completions, status %s", r, got,
          got ? wc_name(wc.status) : "none");
    check(all_bytes(b->remote, 4096, 0), "and moved nothing",
          "the target changed");
  }
  free_pair(&p);
  dereg(mr);
  munmap(buf, 4096 + 4096);
  check(ibv_dealloc_pd(other) == 0, "ibv_dealloc_pd of the second PD",
        "errno %d", errno);
}

/* The same memory registered through two contexts of one device (another
 * ibv_open_device of it, as rdma-core's own tests and programs that open a
 * device per thread do): both MRs reach the same pages. A peer writes
 * through the second context's rkey and reads back through the first's. */
static void t_two_contexts(struct bufs* b) {
  step("memory registered through two contexts of one device");
  struct dev d2 = g_dev[0];
  d2.ctx = ibv_open_device(g_dev[0].ctx->device);
  d2.pd = d2.ctx != NULL ? ibv_alloc_pd(d2.ctx) : NULL;
  if (!check(d2.pd != NULL, "a second context of rdmaplane0", "errno %d",
             errno)) {
    if (d2.ctx != NULL) ibv_close_device(d2.ctx);
    return;
  }
  /* On the heap: small buffers share pages with other data, which the
   * first registration moved for its context. */
  enum { kLen = 1000 };
  uint8_t* buf = malloc(kLen);
  memset(buf, 0, kLen);
  struct ibv_mr* mr1 = reg(&g_dev[0], buf, kLen, kRemoteAccess, "first MR");
  struct ibv_mr* mr2 = reg(&d2, buf, kLen, kRemoteAccess,
                           "the same memory through a second context");
  struct pair p1, p2;
  memset(&p1, 0, sizeof(p1));
  memset(&p2, 0, sizeof(p2));
  if (mr1 != NULL && mr2 != NULL && connect_pair(&p1, &kDefaultOpts,
                                                 &kDefaultOpts) &&
      make_side(&p2.s[0], &d2, &kDefaultOpts) &&
      make_side(&p2.s[1], &g_dev[1], &kDefaultOpts) && pair_to_init(&p2) &&
      pair_to_rts(&p2, &kDefaultOpts, &kDefaultOpts)) {
    fill(b->remote, kLen, 57);
    struct ibv_sge sge = sge_of(b->remote, kLen, b->rmr->lkey);
    const int w = rdma_once(&p2.s[1], IBV_WR_RDMA_WRITE, 1, &sge, 1,
                            (uint64_t)(uintptr_t)buf, mr2->rkey,
                            "WRITE through the second context's rkey", NULL);
    check(w == IBV_WC_SUCCESS && first_diff(buf, b->remote, kLen) == kLen,
          "a WRITE through the second context's MR lands in the buffer",
          "status %d, first difference at byte %zu", w,
          first_diff(buf, b->remote, kLen));
    memset(b->remote + 8192, 0, kLen);
    struct ibv_sge rsge = sge_of(b->remote + 8192, kLen, b->rmr->lkey);
    const int r = rdma_once(&p1.s[1], IBV_WR_RDMA_READ, 2, &rsge, 1,
                            (uint64_t)(uintptr_t)buf, mr1->rkey,
                            "READ through the first context's rkey", NULL);
    check(r == IBV_WC_SUCCESS &&
              first_diff(b->remote + 8192, b->remote, kLen) == kLen,
          "a READ through the first context's MR sees what the WRITE put "
          "there",
          "status %d, first difference at byte %zu", r,
          first_diff(b->remote + 8192, b->remote, kLen));
  }
  free_pair(&p1);
  free_pair(&p2);
  dereg(mr1);
  dereg(mr2);
  free(buf);
  ibv_dealloc_pd(d2.pd);
  check(ibv_close_device(d2.ctx) == 0, "ibv_close_device of the second",
        "failed");
}

/* Two QPs completing into one CQ: each completion names its QP. */
static void t_shared_cq(struct bufs* b) {
  step("two QPs sharing a CQ");
  struct ibv_cq* cq = ibv_create_cq(g_dev[0].ctx, 64, NULL, NULL, 0);
  struct side peer[2];
  struct ibv_qp* qp[2] = {NULL, NULL};
  memset(peer, 0, sizeof(peer));
  bool ok = cq != NULL;
  for (int i = 0; ok && i < 2; ++i) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 8;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp[i] = ibv_create_qp(g_dev[0].pd, &init);
    ok = qp[i] != NULL && make_side(&peer[i], &g_dev[1], &kDefaultOpts) &&
         to_init(qp[i]) == 0 && to_init(peer[i].qp) == 0 &&
         to_rtr(qp[i], &g_dev[1].gid, peer[i].qp->qp_num, 0x700 + i) == 0 &&
         to_rtr(peer[i].qp, &g_dev[0].gid, qp[i]->qp_num, 0x800 + i) == 0 &&
         to_rts(qp[i], 0x800 + i) == 0 && to_rts(peer[i].qp, 0x700 + i) == 0;
  }
  if (check(ok, "two QPs on one CQ connect", "errno %d", errno)) {
    fill(b->local, 8192, 26);
    memset(b->remote, 0, 8192);
    int posted = 0;
    for (int i = 0; i < 2; ++i) {
      struct ibv_sge sge = sge_of(b->local + i * 4096, 4096, b->lmr->lkey);
      struct ibv_send_wr w =
          rdma_wr(IBV_WR_RDMA_WRITE, 1600 + (uint64_t)i, &sge, 1,
                  raddr(b, (size_t)i * 4096), b->rmr->rkey, IBV_SEND_SIGNALED);
      struct ibv_send_wr* bad = NULL;
      if (ibv_post_send(qp[i], &w, &bad) == 0) ++posted;
    }
    struct ibv_wc wc[2];
    const int got = wait_wcs(cq, wc, 2, 10000);
    bool named = got == 2;
    for (int i = 0; i < got; ++i) {
      const int which = (int)(wc[i].wr_id - 1600);
      if (which < 0 || which > 1 || wc[i].qp_num != qp[which]->qp_num ||
          wc[i].status != IBV_WC_SUCCESS) {
        named = false;
      }
    }
    check(posted == 2 && named && got == 2 && wc[0].wr_id != wc[1].wr_id &&
              first_diff(b->local, b->remote, 8192) == 8192,
          "each QP's WRITE completes in the shared CQ with its qp_num",
          "%d posted, %d completions", posted, got);
  }
  for (int i = 0; i < 2; ++i) {
    if (qp[i] != NULL) ibv_destroy_qp(qp[i]);
    free_side(&peer[i]);
  }
  if (cq != NULL) ibv_destroy_cq(cq);
}

/* --- Errors -------------------------------------------------------------- */

/* After an error completion: the QP reports ERR, and a later WR either is
 * refused at the post or completes flushed. */
static void check_after_error(struct side* s, struct bufs* b,
                              const char* what) {
  char name[200];
  snprintf(name, sizeof(name), "%s: the QP is then in ERR", what);
  check_state(s->qp, IBV_QPS_ERR, name);
  struct ibv_sge sge = sge_of(b->local, 64, b->lmr->lkey);
  struct ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 4242, &sge, 1, raddr(b, 0),
                                 b->rmr->rkey, IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  const int r = ibv_post_send(s->qp, &w, &bad);
  struct ibv_wc wc;
  const int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 5000) : 0;
  snprintf(name, sizeof(name), "%s: a later WR fails or is flushed", what);
  check((r != 0 && bad == &w) ||
            (got == 1 && wc.wr_id == 4242 && wc.status == IBV_WC_WR_FLUSH_ERR),
        name, "post %d, %d completions, status %s", r, got,
        got ? wc_name(wc.status) : "none");
}

/* One WR on a fresh pair that must complete with `want`. */
static void expect_error(struct bufs* b, const char* what,
                         enum ibv_wr_opcode op, struct ibv_sge* sge,
                         uint64_t remote_addr, uint32_t rkey, unsigned flags,
                         int sq_sig_all, enum ibv_wc_status want) {
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.sq_sig_all = sq_sig_all;
  if (connect_pair(&p, &o, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    struct ibv_send_wr w = rdma_wr(op, 1000, sge, 1, remote_addr, rkey, flags);
    struct ibv_send_wr* bad = NULL;
    const int r = ibv_post_send(s->qp, &w, &bad);
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    const int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
    check(r == 0 && got == 1 && wc.wr_id == 1000 && wc.status == want &&
              wc.qp_num == s->qp->qp_num,
          what, "post %d, %d completions, status %s (expected %s)", r, got,
          got ? wc_name(wc.status) : "none", wc_name(want));
    if (r == 0 && got == 1) check_after_error(s, b, what);
  }
  free_pair(&p);
}

/* Waits (bounded) until context c has an asynchronous event: async_fd
 * polls readable. */
static bool async_ready(struct ibv_context* c, int timeout_ms) {
  struct pollfd p = {c->async_fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

static bool take_async(struct ibv_context* c, enum ibv_event_type type,
                       const void* what);

/* ibv_modify_qp(3): a queue pair that already sends may change its access
 * flags in passing (RTR -> RTS, RTS -> RTS), and its responder serves
 * what they allow from then on: an operation they no longer allow fails
 * with IBV_WC_REM_ACCESS_ERR and moves nothing; one they now allow works. */
static void access_write(struct pair* p, struct bufs* b, uint8_t fill,
                         enum ibv_wc_status want, const char* what) {
  memset(b->local, fill, 4096);
  memset(b->remote, 0, 4096);
  struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
  struct ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 1400, &sge, 1,
                                 raddr(b, 0), b->rmr->rkey, IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  const int r = ibv_post_send(p->s[0].qp, &w, &bad);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  const int got = r == 0 ? wait_wcs(p->s[0].cq, &wc, 1, 10000) : 0;
  const bool moved = all_bytes(b->remote, 4096, fill);
  check(r == 0 && got == 1 && wc.status == want &&
            moved == (want == IBV_WC_SUCCESS) &&
            (moved || all_bytes(b->remote, 4096, 0)),
        what, "post %d, %d completions, status %s, data %s", r, got,
        got ? wc_name(wc.status) : "none", moved ? "moved" : "not moved");
}

static int modify_access(struct ibv_qp* qp, unsigned access) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.qp_access_flags = access;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
}

static void t_access_in_passing(struct bufs* b) {
  step("access flags changed in passing");
  struct pair p;
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    access_write(&p, b, 0x31, IBV_WC_SUCCESS, "a WRITE the access flags allow");
    int r = modify_access(p.s[1].qp, IBV_ACCESS_REMOTE_READ);
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr init;
    memset(&a, 0, sizeof(a));
    check(r == 0 && ibv_query_qp(p.s[1].qp, &a, IBV_QP_ACCESS_FLAGS, &init) == 0 &&
              a.qp_access_flags == IBV_ACCESS_REMOTE_READ &&
              a.qp_state == IBV_QPS_RTS,
          "RTS -> RTS takes new access flags", "returned %d, flags %#x", r,
          a.qp_access_flags);
    /* Then READ only: a READ works, a WRITE is refused. */
    memset(b->remote, 0x52, 4096);
    memset(b->local, 0, 4096);
    struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
    const int st = rdma_once(&p.s[0], IBV_WR_RDMA_READ, 1401, &sge, 1,
                             raddr(b, 0), b->rmr->rkey,
                             "a READ the new flags allow", NULL);
    check(st == IBV_WC_SUCCESS && all_bytes(b->local, 4096, 0x52),
          "a READ the new flags allow works", "status %d", st);
    access_write(&p, b, 0x33, IBV_WC_REM_ACCESS_ERR,
                 "a WRITE the new flags no longer allow fails with "
                 "IBV_WC_REM_ACCESS_ERR and moves nothing");
    check(take_async(g_dev[1].ctx, IBV_EVENT_QP_ACCESS_ERR, p.s[1].qp),
          "the responder raises IBV_EVENT_QP_ACCESS_ERR", "no event");
  }
  free_pair(&p);

  /* Allowed again at RTS, after a connection that allowed nothing. */
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    int r0 = modify_access(p.s[1].qp, 0);
    int r1 = modify_access(p.s[1].qp, IBV_ACCESS_REMOTE_WRITE);
    check(r0 == 0 && r1 == 0, "RTS -> RTS twice", "returned %d, %d", r0, r1);
    access_write(&p, b, 0x34, IBV_WC_SUCCESS,
                 "a WRITE allowed again at RTS works");
  }
  free_pair(&p);

  /* RTR without REMOTE_WRITE, RTR -> RTS with it. */
  memset(&p, 0, sizeof(p));
  if (make_side(&p.s[0], &g_dev[0], &kDefaultOpts) &&
      make_side(&p.s[1], &g_dev[1], &kDefaultOpts) && pair_to_init(&p)) {
    const uint32_t psn[2] = {g_psn, g_psn + 0x100};
    g_psn += 0x10000;
    bool ok = true;
    for (int i = 0; i < 2; ++i) {
      const int o = 1 - i;
      struct ibv_qp_attr a;
      rtr_attr(&a, &g_dev[o].gid, p.s[o].qp->qp_num, psn[o]);
      a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
      ok = ok && ibv_modify_qp(p.s[i].qp, &a, kRtrMask | IBV_QP_ACCESS_FLAGS) == 0;
    }
    for (int i = 0; i < 2; ++i) {
      struct ibv_qp_attr a;
      rts_attr(&a, psn[i]);
      a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
      ok = ok && ibv_modify_qp(p.s[i].qp, &a, kRtsMask | IBV_QP_ACCESS_FLAGS) == 0;
    }
    if (check(ok, "RTR with READ only, RTR -> RTS adding WRITE",
              "a modify failed")) {
      access_write(&p, b, 0x35, IBV_WC_SUCCESS,
                   "a WRITE allowed at RTR -> RTS works");
    }
  }
  free_pair(&p);

  /* min_rnr_timer may change at RTS too; a code above 31 is EINVAL. */
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.min_rnr_timer = 3;
    const int r = ibv_modify_qp(p.s[1].qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
    a.min_rnr_timer = 133;
    const int bad = ibv_modify_qp(p.s[1].qp, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
    struct ibv_qp_init_attr init;
    memset(&a, 0, sizeof(a));
    check(r == 0 && bad == EINVAL &&
              ibv_query_qp(p.s[1].qp, &a, IBV_QP_MIN_RNR_TIMER, &init) == 0 &&
              a.min_rnr_timer == 3,
          "RTS -> RTS takes min_rnr_timer 3 and refuses 133",
          "returned %d, %d; timer %u", r, bad, a.min_rnr_timer);
  }
  free_pair(&p);
}

/* ibv_get_async_event(3): a queue pair that the transport ends without a
 * completion to say so (here, the responder of a WRITE it refused for a
 * wrong rkey) raises its affiliated error, IBV_EVENT_QP_ACCESS_ERR, on its
 * context, whether or not its CQ is polled; the
 * context's async_fd polls readable; the requester, whose completion
 * carries the error, raises none. */
static void t_async_events(struct bufs* b) {
  step("asynchronous events");
  struct ibv_context* c0 = g_dev[0].ctx;
  struct ibv_context* c1 = g_dev[1].ctx;
  check(!async_ready(c0, 0) && !async_ready(c1, 0),
        "no asynchronous event is pending before the checks",
        "an event is pending");
  struct pair p;
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
    struct ibv_send_wr w =
        rdma_wr(IBV_WR_RDMA_WRITE, 1300, &sge, 1, raddr(b, 0),
                b->rmr->rkey ^ 0x5A5A00u, IBV_SEND_SIGNALED);
    struct ibv_send_wr* bad = NULL;
    const int r = ibv_post_send(p.s[0].qp, &w, &bad);
    struct ibv_wc wc;
    const int got = r == 0 ? wait_wcs(p.s[0].cq, &wc, 1, 10000) : 0;
    check(got == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
          "events: a WRITE with a wrong rkey fails", "post %d, %d completions",
          r, got);
    /* Nobody polls the responder's CQ. */
    const bool ready = async_ready(c1, 5000);
    check(ready, "the responder's context's async_fd polls readable",
          "nothing within 5 s");
    if (ready) {
      struct ibv_async_event ev;
      memset(&ev, 0, sizeof(ev));
      const int g = ibv_get_async_event(c1, &ev);
      check(g == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR &&
                ev.element.qp == p.s[1].qp,
            "the responder's queue pair raises IBV_EVENT_QP_ACCESS_ERR",
            "returned %d, event %s, qp %p (responder's %p)", g,
            ibv_event_type_str(ev.event_type), (void*)ev.element.qp,
            (void*)p.s[1].qp);
      if (g == 0) ibv_ack_async_event(&ev);
      check_state(p.s[1].qp, IBV_QPS_ERR, "the responder's QP is then in ERR");
    }
    check(!async_ready(c0, 200),
          "the requester, whose completion says it, raises no event",
          "an event came");
    /* With O_NONBLOCK and nothing pending: EAGAIN. */
    const int flags = fcntl(c1->async_fd, F_GETFL);
    fcntl(c1->async_fd, F_SETFL, flags | O_NONBLOCK);
    struct ibv_async_event none;
    errno = 0;
    const int g = ibv_get_async_event(c1, &none);
    check(g == -1 && errno == EAGAIN,
          "ibv_get_async_event with nothing pending and O_NONBLOCK: EAGAIN",
          "returned %d errno %d", g, errno);
    fcntl(c1->async_fd, F_SETFL, flags);
  }
  free_pair(&p);
}

/* Loopback: two queue pairs of one daemon (rdmaplane0) connected to each
 * other, by that daemon's own GID, as every RNIC and soft-RoCE allow:
 * WRITE, READ and SEND/RECV with immediate data land. */
static void t_loopback(void) {
  step("loopback: two QPs of one daemon");
  struct dev* d = &g_dev[0];
  struct qp_opts o = kDefaultOpts;
  o.max_recv_wr = 4;
  struct side s0, s1;
  if (!make_side(&s0, d, &o) || !make_side(&s1, d, &o)) return;
  int r = to_init(s0.qp);
  if (r == 0) r = to_init(s1.qp);
  if (r == 0) r = to_rtr(s0.qp, &d->gid, s1.qp->qp_num, 0x6161);
  if (r == 0) r = to_rtr(s1.qp, &d->gid, s0.qp->qp_num, 0x6262);
  if (r == 0) r = to_rts(s0.qp, 0x6262);
  if (r == 0) r = to_rts(s1.qp, 0x6161);
  if (!check(r == 0, "loopback: both QPs reach RTS with the daemon's own GID",
             "returned %d", r)) {
    free_side(&s0);
    free_side(&s1);
    return;
  }
  const size_t len = 65536;
  uint8_t* src = pages(len);
  uint8_t* dst = pages(len);
  uint8_t* back = pages(len);
  struct ibv_mr* smr = reg(d, src, len, kRemoteAccess, "loopback: source MR");
  struct ibv_mr* dmr = reg(d, dst, len, kRemoteAccess, "loopback: target MR");
  struct ibv_mr* bmr = reg(d, back, len, kRemoteAccess, "loopback: read MR");
  if (smr != NULL && dmr != NULL && bmr != NULL) {
    fill(src, len, 31);
    struct ibv_sge sge = sge_of(src, (uint32_t)len, smr->lkey);
    int st = rdma_once(&s0, IBV_WR_RDMA_WRITE, 1400, &sge, 1,
                       (uint64_t)(uintptr_t)dst, dmr->rkey, "loopback WRITE",
                       NULL);
    check(st == IBV_WC_SUCCESS && first_diff(src, dst, len) == len,
          "loopback: a 64 KiB WRITE lands", "status %s, first difference %zu",
          wc_name(st), first_diff(src, dst, len));
    struct ibv_sge rsge = sge_of(back, (uint32_t)len, bmr->lkey);
    st = rdma_once(&s1, IBV_WR_RDMA_READ, 1401, &rsge, 1,
                   (uint64_t)(uintptr_t)dst, dmr->rkey, "loopback READ", NULL);
    check(st == IBV_WC_SUCCESS && first_diff(src, back, len) == len,
          "loopback: a 64 KiB READ of it comes back", "status %s",
          wc_name(st));
    /* SEND with immediate data into a posted receive. */
    memset(dst, 0, 4096);
    struct ibv_sge recv_sge = sge_of(dst, 4096, dmr->lkey);
    struct ibv_recv_wr rwr;
    memset(&rwr, 0, sizeof(rwr));
    rwr.wr_id = 1402;
    rwr.sg_list = &recv_sge;
    rwr.num_sge = 1;
    struct ibv_recv_wr* rbad = NULL;
    r = ibv_post_recv(s1.qp, &rwr, &rbad);
    struct ibv_sge send_sge = sge_of(src, 4096, smr->lkey);
    struct ibv_send_wr swr;
    memset(&swr, 0, sizeof(swr));
    swr.wr_id = 1403;
    swr.sg_list = &send_sge;
    swr.num_sge = 1;
    swr.opcode = IBV_WR_SEND_WITH_IMM;
    swr.imm_data = htonl(0x1234);
    swr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* sbad = NULL;
    if (r == 0) r = ibv_post_send(s0.qp, &swr, &sbad);
    struct ibv_wc rwc, swc;
    const int rgot = r == 0 ? wait_wcs(s1.cq, &rwc, 1, 10000) : 0;
    const int sgot = r == 0 ? wait_wcs(s0.cq, &swc, 1, 10000) : 0;
    check(r == 0 && rgot == 1 && sgot == 1 && rwc.wr_id == 1402 &&
              rwc.status == IBV_WC_SUCCESS && rwc.byte_len == 4096 &&
              (rwc.wc_flags & IBV_WC_WITH_IMM) &&
              rwc.imm_data == htonl(0x1234) && swc.status == IBV_WC_SUCCESS &&
              first_diff(src, dst, 4096) == 4096,
          "loopback: a SEND with immediate data lands in the posted receive",
          "post %d, %d/%d completions, recv status %s len %u", r, rgot, sgot,
          rgot ? wc_name(rwc.status) : "-", rgot ? rwc.byte_len : 0);
  }
  free_side(&s0);
  free_side(&s1);
  if (smr != NULL) dereg(smr);
  if (dmr != NULL) dereg(dmr);
  if (bmr != NULL) dereg(bmr);
}

static void t_remote_errors(struct bufs* b) {
  step("remote access errors");
  struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
  expect_error(b,
               "WRITE with a wrong rkey completes with IBV_WC_REM_ACCESS_ERR",
               IBV_WR_RDMA_WRITE, &sge, raddr(b, 0), b->rmr->rkey ^ 0x5A5A00u,
               IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
  expect_error(b, "READ with a wrong rkey completes with IBV_WC_REM_ACCESS_ERR",
               IBV_WR_RDMA_READ, &sge, raddr(b, 0), b->rmr->rkey ^ 0x5A5A00u,
               IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
  /* An error completes even when the WR was not signaled. */
  expect_error(b,
               "an unsignaled WRITE with a wrong rkey completes with "
               "IBV_WC_REM_ACCESS_ERR",
               IBV_WR_RDMA_WRITE, &sge, raddr(b, 0), b->rmr->rkey ^ 0x5A5A00u,
               0, 0, IBV_WC_REM_ACCESS_ERR);

  uint8_t* r_only = pages(65536);
  uint8_t* w_only = pages(65536);
  uint8_t* l_only = pages(65536);
  struct ibv_mr* ro =
      reg(&g_dev[1], r_only, 65536,
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, "read-only MR");
  struct ibv_mr* wo =
      reg(&g_dev[1], w_only, 65536,
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "write-only MR");
  struct ibv_mr* lo =
      reg(&g_dev[1], l_only, 65536, IBV_ACCESS_LOCAL_WRITE, "local MR");
  if (ro != NULL) {
    memset(r_only, 0x11, 65536);
    expect_error(b,
                 "WRITE to an MR without REMOTE_WRITE completes with "
                 "IBV_WC_REM_ACCESS_ERR",
                 IBV_WR_RDMA_WRITE, &sge, (uint64_t)(uintptr_t)r_only, ro->rkey,
                 IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
    check(all_bytes(r_only, 65536, 0x11), "the refused WRITE changed nothing",
          "the read-only MR changed");
    /* READ beyond the MR's end: the last 100 bytes and 100 more. */
    expect_error(
        b, "READ beyond the MR's end completes with IBV_WC_REM_ACCESS_ERR",
        IBV_WR_RDMA_READ, &sge, (uint64_t)(uintptr_t)(r_only + 65536 - 100),
        ro->rkey, IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
  }
  if (wo != NULL) {
    expect_error(b,
                 "READ from an MR without REMOTE_READ completes with "
                 "IBV_WC_REM_ACCESS_ERR",
                 IBV_WR_RDMA_READ, &sge, (uint64_t)(uintptr_t)w_only, wo->rkey,
                 IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
    memset(w_only, 0x22, 65536);
    expect_error(
        b, "WRITE beyond the MR's end completes with IBV_WC_REM_ACCESS_ERR",
        IBV_WR_RDMA_WRITE, &sge, (uint64_t)(uintptr_t)(w_only + 65536 - 100),
        wo->rkey, IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
    check(all_bytes(w_only, 65536, 0x22),
          "the WRITE beyond the end changed nothing", "the MR changed");
  }
  if (lo != NULL) {
    expect_error(b,
                 "WRITE with the rkey of an MR without remote access completes "
                 "with IBV_WC_REM_ACCESS_ERR",
                 IBV_WR_RDMA_WRITE, &sge, (uint64_t)(uintptr_t)l_only, lo->rkey,
                 IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
  }
  /* The rkey of a deregistered MR reaches nothing. */
  if (wo != NULL) {
    const uint32_t old = wo->rkey;
    dereg(wo);
    wo = NULL;
    expect_error(b,
                 "WRITE with the rkey of a deregistered MR completes with "
                 "IBV_WC_REM_ACCESS_ERR",
                 IBV_WR_RDMA_WRITE, &sge, (uint64_t)(uintptr_t)w_only, old,
                 IBV_SEND_SIGNALED, 0, IBV_WC_REM_ACCESS_ERR);
  }
  dereg(ro);
  dereg(lo);

  /* After the failed WR of a list, the rest are flushed. */
  struct pair p;
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    struct ibv_send_wr wrs[3];
    for (int i = 0; i < 3; ++i) {
      wrs[i] = rdma_wr(
          IBV_WR_RDMA_WRITE, 1100 + (uint64_t)i, &sge, 1, raddr(b, 0),
          i == 0 ? b->rmr->rkey ^ 0x5A5A00u : b->rmr->rkey, IBV_SEND_SIGNALED);
      wrs[i].next = i < 2 ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &wrs[0], &bad);
    struct ibv_wc wc[3];
    int got = r == 0 ? wait_wcs(s->cq, wc, 3, 10000) : 0;
    check(r == 0 && got == 3 && wc[0].wr_id == 1100 &&
              wc[0].status == IBV_WC_REM_ACCESS_ERR && wc[1].wr_id == 1101 &&
              wc[1].status == IBV_WC_WR_FLUSH_ERR && wc[2].wr_id == 1102 &&
              wc[2].status == IBV_WC_WR_FLUSH_ERR,
          "a list after a failed WRITE: REM_ACCESS_ERR, then WR_FLUSH_ERR for "
          "the rest",
          "post %d, %d completions: %s %s %s", r, got,
          got > 0 ? wc_name(wc[0].status) : "-",
          got > 1 ? wc_name(wc[1].status) : "-",
          got > 2 ? wc_name(wc[2].status) : "-");
  }
  free_pair(&p);
}

/* --- Atomics ------------------------------------------------------------- */

static struct ibv_send_wr atomic_wr(enum ibv_wr_opcode op, uint64_t wr_id,
                                    struct ibv_sge* sge, uint64_t remote_addr,
                                    uint32_t rkey, uint64_t compare_add,
                                    uint64_t swap) {
  /* An RDMA WR with the atomic half of the union filled instead. */
  struct ibv_send_wr wr = rdma_wr(op, wr_id, sge, 1, 0, 0, IBV_SEND_SIGNALED);
  memset(&wr.wr, 0, sizeof(wr.wr));
  wr.wr.atomic.remote_addr = remote_addr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

/* Posts one atomic and waits for its completion: its status, or -1 after a
 * failed check. */
static int atomic_once(struct side* s, enum ibv_wr_opcode op, uint64_t wr_id,
                       struct ibv_sge* sge, uint64_t remote_addr,
                       uint32_t rkey, uint64_t compare_add, uint64_t swap,
                       const char* name, struct ibv_wc* out) {
  struct ibv_send_wr wr =
      atomic_wr(op, wr_id, sge, remote_addr, rkey, compare_add, swap);
  return post_once(s, &wr, name, out);
}

static uint64_t word_at(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static void set_word(uint8_t* p, uint64_t v) { memcpy(p, &v, sizeof(v)); }

static void t_atomics(struct bufs* b) {
  step("atomics: COMPARE AND SWAP, FETCH AND ADD");
  uint8_t* target = pages(65536);
  struct ibv_mr* amr =
      reg(&g_dev[1], target, 65536,
          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
              IBV_ACCESS_REMOTE_READ,
          "atomic MR");
  if (amr == NULL) return;
  const uint64_t at = (uint64_t)(uintptr_t)target;
  uint8_t* result = b->local;
  struct ibv_sge sge = sge_of(result, 8, b->lmr->lkey);
  struct ibv_wc wc;
  struct pair p;
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    memset(target, 0, 4096);
    set_word(target + 64, 0x1111222233334444ull);
    set_word(result, 0xEEEEEEEEEEEEEEEEull);
    int st = atomic_once(s, IBV_WR_ATOMIC_CMP_AND_SWP, 1201, &sge, at + 64,
                         amr->rkey, 0x1111222233334444ull,
                         0x5555666677778888ull, "COMPARE AND SWAP", &wc);
    check(st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
              wc.byte_len == 8 &&
              word_at(result) == 0x1111222233334444ull &&
              word_at(target + 64) == 0x5555666677778888ull,
          "a COMPARE AND SWAP that matches swaps, returns the original value "
          "(opcode COMP_SWAP, byte_len 8)",
          "status %s opcode %d byte_len %u, returned %#llx, word %#llx",
          wc_name(st), wc.opcode, wc.byte_len,
          (unsigned long long)word_at(result),
          (unsigned long long)word_at(target + 64));
    st = atomic_once(s, IBV_WR_ATOMIC_CMP_AND_SWP, 1202, &sge, at + 64,
                     amr->rkey, 0x1111222233334444ull, 0x9999ull,
                     "COMPARE AND SWAP that does not match", &wc);
    check(st == IBV_WC_SUCCESS &&
              word_at(result) == 0x5555666677778888ull &&
              word_at(target + 64) == 0x5555666677778888ull,
          "a COMPARE AND SWAP that does not match leaves the word and returns "
          "it",
          "status %s, returned %#llx, word %#llx", wc_name(st),
          (unsigned long long)word_at(result),
          (unsigned long long)word_at(target + 64));
    set_word(target + 128, 1000);
    st = atomic_once(s, IBV_WR_ATOMIC_FETCH_AND_ADD, 1203, &sge, at + 128,
                     amr->rkey, 24, 0, "FETCH AND ADD", &wc);
    check(st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
              wc.byte_len == 8 && word_at(result) == 1000 &&
              word_at(target + 128) == 1024,
          "a FETCH AND ADD adds and returns the original value (opcode "
          "FETCH_ADD, byte_len 8)",
          "status %s opcode %d byte_len %u, returned %llu, word %llu",
          wc_name(st), wc.opcode, wc.byte_len,
          (unsigned long long)word_at(result),
          (unsigned long long)word_at(target + 128));
    /* A list of 16 FETCH AND ADDs of 1, each into its own result word:
     * they run in order, each sees the one before. */
    struct ibv_sge many[16];
    struct ibv_send_wr wrs[16];
    set_word(target + 256, 0);
    for (int i = 0; i < 16; ++i) {
      set_word(result + 8 * i, ~0ull);
      many[i] = sge_of(result + 8 * i, 8, b->lmr->lkey);
      wrs[i] = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1300 + (uint64_t)i,
                         &many[i], at + 256, amr->rkey, 1, 0);
      wrs[i].next = i < 15 ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &wrs[0], &bad);
    struct ibv_wc w16[16];
    int got = r == 0 ? wait_wcs(s->cq, w16, 16, 10000) : 0;
    bool ok = got == 16 && word_at(target + 256) == 16;
    for (int i = 0; i < got; ++i) {
      if (w16[i].wr_id != 1300 + (uint64_t)i ||
          w16[i].status != IBV_WC_SUCCESS ||
          word_at(result + 8 * i) != (uint64_t)i) {
        ok = false;
      }
    }
    check(r == 0 && ok,
          "16 FETCH AND ADDs of 1 in one list return 0..15 in order, and the "
          "word is 16",
          "post %d, %d completions, word %llu", r, got,
          (unsigned long long)word_at(target + 256));
    /* An SGE other than one of 8 bytes is refused at post. */
    struct ibv_sge short_sge = sge_of(result, 4, b->lmr->lkey);
    struct ibv_send_wr w =
        atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1210, &short_sge, at + 128,
                  amr->rkey, 1, 0);
    bad = NULL;
    r = ibv_post_send(s->qp, &w, &bad);
    check(r == EINVAL && bad == &w,
          "an atomic whose SGE is not 8 bytes is refused with EINVAL",
          "returned %d", r);
    check(extra_wcs(s->cq, 100) == 0 && word_at(target + 128) == 1024,
          "the refused atomic did nothing", "word %llu",
          (unsigned long long)word_at(target + 128));
  }
  free_pair(&p);

  /* A misaligned address is an invalid request at the peer. */
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    set_word(target + 512, 7);
    set_word(target + 520, 9);
    int st = atomic_once(s, IBV_WR_ATOMIC_FETCH_AND_ADD, 1220, &sge, at + 516,
                         amr->rkey, 1, 0, "misaligned FETCH AND ADD", &wc);
    check(st == IBV_WC_REM_INV_REQ_ERR && word_at(target + 512) == 7 &&
              word_at(target + 520) == 9,
          "an atomic to a misaligned address completes with "
          "IBV_WC_REM_INV_REQ_ERR and changes nothing",
          "status %s", wc_name(st));
    if (st >= 0) check_after_error(s, b, "a misaligned atomic");
    /* The responder refused an invalid request: its queue pair's
     * affiliated error (IBA 11.6.3). */
    check(take_async(g_dev[1].ctx, IBV_EVENT_QP_REQ_ERR, p.s[1].qp),
          "the responder's queue pair raises IBV_EVENT_QP_REQ_ERR",
          "no such event within 10 s");
  }
  free_pair(&p);

  /* An MR without REMOTE_ATOMIC: remote access error. */
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    set_word(b->remote, 5);
    int st = atomic_once(s, IBV_WR_ATOMIC_CMP_AND_SWP, 1230, &sge, raddr(b, 0),
                         b->rmr->rkey, 5, 6, "COMPARE AND SWAP without rights",
                         &wc);
    check(st == IBV_WC_REM_ACCESS_ERR && word_at(b->remote) == 5,
          "an atomic on an MR without REMOTE_ATOMIC completes with "
          "IBV_WC_REM_ACCESS_ERR and changes nothing",
          "status %s", wc_name(st));
  }
  free_pair(&p);
  dereg(amr);
}

/* --- Memory windows ---------------------------------------------------- */

static int post_recv_area(struct side* s, struct bufs* b, int i,
                          uint64_t wr_id, uint32_t len);

/* A BIND_MW work request: window mw bound under `rkey` to [addr, addr +
 * len) of mr with `access`. */
static struct ibv_send_wr bind_wr(uint64_t wr_id, struct ibv_mw* mw,
                                  uint32_t rkey, struct ibv_mr* mr,
                                  const void* addr, size_t len,
                                  unsigned access, unsigned flags) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)addr;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = access;
  return wr;
}

static struct ibv_send_wr local_inv_wr(uint64_t wr_id, uint32_t rkey,
                                       unsigned flags) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = flags;
  wr.invalidate_rkey = rkey;
  return wr;
}

enum {
  kWindowAccess = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                  IBV_ACCESS_REMOTE_ATOMIC
};

/* Binds type 2 window mw on p's memory side (s[1]) to [at, at + len) of
 * mr under the next key; returns the bind's status (-1: no completion). */
static int bind_type2(struct pair* p, struct ibv_mw* mw, uint32_t rkey,
                      struct ibv_mr* mr, const uint8_t* at, size_t len,
                      unsigned access, const char* name) {
  struct ibv_send_wr wr =
      bind_wr(7000, mw, rkey, mr, at, len, access, IBV_SEND_SIGNALED);
  struct ibv_wc wc;
  const int st = post_once(&p->s[1], &wr, name, &wc);
  if (st == IBV_WC_SUCCESS) {
    check(wc.opcode == IBV_WC_BIND_MW && wc.byte_len == 0, name,
          "opcode %d byte_len %u", wc.opcode, wc.byte_len);
  }
  return st;
}

/* A WRITE of len bytes from b->local through `rkey` at `va`, from s[0]. */
static int write_through(struct pair* p, struct bufs* b, uint64_t va,
                         uint32_t rkey, uint32_t len, const char* name) {
  struct ibv_sge sge = sge_of(b->local, len, b->lmr->lkey);
  return rdma_once(&p->s[0], IBV_WR_RDMA_WRITE, 7100, &sge, 1, va, rkey, name,
                   NULL);
}

/* One WR of s[1] that must complete with `want`, then the QP is in ERR and
 * a later WR is flushed. */
static void expect_local_error(struct pair* p, struct bufs* b,
                               struct ibv_send_wr* wr, int want,
                               const char* name) {
  struct ibv_wc wc;
  const int st = post_once(&p->s[1], wr, name, &wc);
  check(st == want, name, "status %s (expected %s)", wc_name(st),
        wc_name(want));
  if (st < 0) return;
  char after[200];
  snprintf(after, sizeof(after), "%s: the QP is then in ERR", name);
  check_state(p->s[1].qp, IBV_QPS_ERR, after);
  struct ibv_sge sge = sge_of(b->remote, 64, b->rmr->lkey);
  struct ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 4243, &sge, 1,
                                 (uint64_t)(uintptr_t)b->local, b->lmr->rkey,
                                 IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  const int r = ibv_post_send(p->s[1].qp, &w, &bad);
  const int got = r == 0 ? wait_wcs(p->s[1].cq, &wc, 1, 5000) : 0;
  snprintf(after, sizeof(after), "%s: a later WR is flushed", name);
  check(got == 1 && wc.wr_id == 4243 && wc.status == IBV_WC_WR_FLUSH_ERR,
        after, "post %d, %d completions, status %s", r, got,
        got ? wc_name(wc.status) : "none");
}

static void t_memory_windows(struct bufs* b) {
  step("memory windows: the device says what it serves");
  struct dev* d = &g_dev[1];
  struct ibv_device_attr da;
  int r = ibv_query_device(d->ctx, &da);
  check(r == 0 && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) != 0 &&
            (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0 &&
            (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A) == 0 &&
            da.max_mw > 0,
        "ibv_query_device reports memory windows of type 1 and 2B (not "
        "2A) and max_mw",
        "returned %d, flags %#llx, max_mw %d", r,
        (unsigned long long)da.device_cap_flags, da.max_mw);
  errno = 0;
  struct ibv_mw* bad_type = ibv_alloc_mw(d->pd, (enum ibv_mw_type)3);
  check(bad_type == NULL && errno == EINVAL,
        "ibv_alloc_mw of a type other than 1 and 2 fails with EINVAL",
        "mw %p errno %d", (void*)bad_type, errno);

  /* The memory the windows open onto: 64 KiB on rdmaplane1. */
  uint8_t* mem = pages(65536);
  struct ibv_mr* mr = reg(d, mem, 65536,
                          kRemoteAccess | IBV_ACCESS_REMOTE_ATOMIC |
                              IBV_ACCESS_MW_BIND,
                          "an MR that allows binding");
  struct ibv_mr* nobind = reg(d, mem, 65536, kRemoteAccess, "an MR without MW_BIND");
  if (mr == NULL || nobind == NULL) return;
  struct ibv_mw* mw = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
  if (!check(mw != NULL && mw->type == IBV_MW_TYPE_2 && mw->pd == d->pd,
             "ibv_alloc_mw (type 2)", "errno %d", errno)) {
    return;
  }
  struct ibv_wc wc;
  struct pair p;

  step("memory windows: a type 2 window bound, used and invalidated");
  if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    const uint32_t key = ibv_inc_rkey(mw->rkey);
    uint8_t* win = mem + 4096;
    int st = bind_type2(&p, mw, key, mr, win, 8192, kWindowAccess,
                        "BIND_MW of a type 2 window completes (IBV_WC_BIND_MW)");
    check(st == IBV_WC_SUCCESS && (key >> 8) == (mw->rkey >> 8) && key != mw->rkey,
          "the window is bound under the key asked for (ibv_inc_rkey)",
          "status %s, key %#x, window %#x", wc_name(st), key, mw->rkey);
    memset(mem, 0, 65536);
    fill(b->local, 8192, 900);
    st = write_through(&p, b, (uint64_t)(uintptr_t)win, key, 8192,
                       "WRITE through the window");
    check(st == IBV_WC_SUCCESS && first_diff(win, b->local, 8192) == 8192 &&
              all_bytes(mem, 4096, 0) && all_bytes(win + 8192, 4096, 0),
          "a WRITE through the window lands where the window is, and only "
          "there",
          "status %s", wc_name(st));
    fill(win + 100, 300, 901);
    struct ibv_sge rs = sge_of(b->local2, 300, b->lmr2->lkey);
    st = rdma_once(&p.s[0], IBV_WR_RDMA_READ, 7101, &rs, 1,
                   (uint64_t)(uintptr_t)(win + 100), key, "READ through the window",
                   NULL);
    check(st == IBV_WC_SUCCESS && first_diff(b->local2, win + 100, 300) == 300,
          "a READ through the window returns the window's bytes", "status %s",
          wc_name(st));
    set_word(win + 64, 40);
    struct ibv_sge as = sge_of(b->local2, 8, b->lmr2->lkey);
    st = atomic_once(&p.s[0], IBV_WR_ATOMIC_FETCH_AND_ADD, 7102, &as,
                     (uint64_t)(uintptr_t)(win + 64), key, 2, 0,
                     "FETCH AND ADD through the window", &wc);
    check(st == IBV_WC_SUCCESS && word_at(win + 64) == 42 &&
              word_at(b->local2) == 40,
          "an atomic through the window", "status %s, word %llu", wc_name(st),
          (unsigned long long)word_at(win + 64));
    /* The region stays while the window is bound to it. */
    r = ibv_dereg_mr(mr);
    check(r == EBUSY, "ibv_dereg_mr of a region a window is bound to fails "
          "with EBUSY", "returned %d", r);
    /* A second bind of a bound type 2 window is refused (o10-37.2.30):
     * checked on a pair of its own below. LOCAL_INV: */
    struct ibv_send_wr inv = local_inv_wr(7003, key, IBV_SEND_SIGNALED);
    st = post_once(&p.s[1], &inv, "LOCAL_INV of the window", &wc);
    check(st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
          "LOCAL_INV of a bound type 2 window completes (IBV_WC_LOCAL_INV)",
          "status %s opcode %d", wc_name(st), wc.opcode);
    /* Free again: bound under a new key, which works; the old one not. */
    const uint32_t key2 = ibv_inc_rkey(key);
    st = bind_type2(&p, mw, key2, mr, win, 4096, kWindowAccess,
                    "BIND_MW again after LOCAL_INV");
    check(st == IBV_WC_SUCCESS, "an invalidated type 2 window binds again",
          "status %s", wc_name(st));
    st = write_through(&p, b, (uint64_t)(uintptr_t)win, key2, 64,
                       "WRITE under the new key");
    check(st == IBV_WC_SUCCESS, "the window works under its new key",
          "status %s", wc_name(st));
    st = write_through(&p, b, (uint64_t)(uintptr_t)win, key, 64,
                       "WRITE under the invalidated key");
    check(st == IBV_WC_REM_ACCESS_ERR,
          "a WRITE under the invalidated key completes with "
          "IBV_WC_REM_ACCESS_ERR",
          "status %s", wc_name(st));
    mw->rkey = key2;
  }
  free_pair(&p);

  step("memory windows: a window answers its own range and queue pair");
  {
    /* Bound on pair p; reached through pair q of the same protection
     * domains: refused, as is an access outside the window but inside the
     * region (rxe checks only the region). */
    struct pair q;
    if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts) &&
        connect_pair(&q, &kDefaultOpts, &kDefaultOpts)) {
      struct ibv_send_wr inv = local_inv_wr(7004, mw->rkey, IBV_SEND_SIGNALED);
      int st = post_once(&p.s[1], &inv, "LOCAL_INV before a new bind", &wc);
      const uint32_t key = ibv_inc_rkey(mw->rkey);
      st = bind_type2(&p, mw, key, mr, mem + 8192, 4096, kWindowAccess,
                      "BIND_MW on another pair");
      mw->rkey = key;
      st = write_through(&q, b, (uint64_t)(uintptr_t)(mem + 8192), key, 64,
                         "WRITE through a queue pair the window is not bound to");
      check(st == IBV_WC_REM_ACCESS_ERR,
            "a type 2 window is reached only through the queue pair that "
            "bound it (IBV_WC_REM_ACCESS_ERR through another)",
            "status %s", wc_name(st));
      memset(mem + 8192 - 64, 0, 64);
      st = write_through(&p, b, (uint64_t)(uintptr_t)(mem + 8192 - 64), key,
                         128, "WRITE across the window's start");
      check(st == IBV_WC_REM_ACCESS_ERR && all_bytes(mem + 8192 - 64, 64, 0),
            "an access outside the window but inside the region completes "
            "with IBV_WC_REM_ACCESS_ERR",
            "status %s", wc_name(st));
    }
    free_pair(&q);
    free_pair(&p);
  }

  step("memory windows: SEND with Invalidate");
  {
    struct qp_opts o = kDefaultOpts;
    o.max_recv_wr = 4;
    if (connect_pair(&p, &o, &o)) {
      struct ibv_send_wr inv = local_inv_wr(7005, mw->rkey, IBV_SEND_SIGNALED);
      int st = post_once(&p.s[1], &inv, "LOCAL_INV before a new bind", &wc);
      const uint32_t key = ibv_inc_rkey(mw->rkey);
      st = bind_type2(&p, mw, key, mr, mem, 4096, kWindowAccess,
                      "BIND_MW for SEND with Invalidate");
      mw->rkey = key;
      r = post_recv_area(&p.s[1], b, 0, 7200, 4096);
      fill(b->local, 3000, 902);
      struct ibv_sge ssge = sge_of(b->local, 3000, b->lmr->lkey);
      struct ibv_send_wr swr =
          rdma_wr(IBV_WR_SEND_WITH_INV, 7201, &ssge, 1, 0, 0, IBV_SEND_SIGNALED);
      swr.invalidate_rkey = key;
      st = post_once(&p.s[0], &swr, "SEND with Invalidate", &wc);
      check(r == 0 && st == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
            "the SEND with Invalidate completes at its sender (IBV_WC_SEND)",
            "post_recv %d, status %s opcode %d", r, wc_name(st), wc.opcode);
      struct ibv_wc rwc;
      memset(&rwc, 0, sizeof(rwc));
      const int got = wait_wcs(p.s[1].cq, &rwc, 1, 10000);
      check(got == 1 && rwc.wr_id == 7200 && rwc.status == IBV_WC_SUCCESS &&
                rwc.opcode == IBV_WC_RECV && rwc.byte_len == 3000 &&
                (rwc.wc_flags & IBV_WC_WITH_INV) != 0 &&
                (rwc.wc_flags & IBV_WC_WITH_IMM) == 0 &&
                rwc.invalidated_rkey == key &&
                first_diff(b->remote, b->local, 3000) == 3000,
            "the receive completes with IBV_WC_WITH_INV and the invalidated "
            "key, and holds the message",
            "%d completions, status %s opcode %d flags %#x key %#x (want %#x)",
            got, wc_name(rwc.status), rwc.opcode, rwc.wc_flags,
            rwc.invalidated_rkey, key);
      st = write_through(&p, b, (uint64_t)(uintptr_t)mem, key, 64,
                         "WRITE under the key the peer invalidated");
      check(st == IBV_WC_REM_ACCESS_ERR,
            "the key a SEND with Invalidate named no longer works",
            "status %s", wc_name(st));
    }
    free_pair(&p);
    /* A key the receiver may not invalidate (an MR's): the receive fails
     * with IBV_WC_REM_INV_REQ_ERR, the sender's SEND completes (IBA class
     * J: the data were placed and acknowledged). */
    if (connect_pair(&p, &o, &o)) {
      r = post_recv_area(&p.s[1], b, 0, 7210, 4096);
      struct ibv_sge ssge = sge_of(b->local, 100, b->lmr->lkey);
      struct ibv_send_wr swr =
          rdma_wr(IBV_WR_SEND_WITH_INV, 7211, &ssge, 1, 0, 0, IBV_SEND_SIGNALED);
      swr.invalidate_rkey = mr->rkey;
      int st = post_once(&p.s[0], &swr, "SEND with Invalidate of an MR's key", &wc);
      struct ibv_wc rwc;
      memset(&rwc, 0, sizeof(rwc));
      const int got = wait_wcs(p.s[1].cq, &rwc, 1, 10000);
      check(r == 0 && st == IBV_WC_SUCCESS && got == 1 && rwc.wr_id == 7210 &&
                rwc.status == IBV_WC_REM_INV_REQ_ERR,
            "a SEND with Invalidate of a key that is no type 2 window of the "
            "receiving QP: its receive completes with IBV_WC_REM_INV_REQ_ERR",
            "post_recv %d, send %s, %d receive completions, status %s", r,
            wc_name(st), got, got ? wc_name(rwc.status) : "none");
      check_state(p.s[1].qp, IBV_QPS_ERR,
                  "the receiving QP is then in ERR");
      /* The MR's key still works on a fresh pair. */
      struct pair q;
      if (connect_pair(&q, &kDefaultOpts, &kDefaultOpts)) {
        st = write_through(&q, b, (uint64_t)(uintptr_t)mem, mr->rkey, 64,
                           "WRITE under the MR's key afterwards");
        check(st == IBV_WC_SUCCESS, "the MR's key was not invalidated",
              "status %s", wc_name(st));
      }
      free_pair(&q);
    }
    free_pair(&p);
  }

  step("memory windows: binds the rules refuse");
  {
    struct {
      struct ibv_mr* region;
      size_t offset;
      size_t len;
      unsigned access;
      const char* name;
    } bad_binds[] = {
        {nobind, 0, 4096, kWindowAccess,
         "a bind to an MR registered without IBV_ACCESS_MW_BIND completes "
         "with IBV_WC_MW_BIND_ERR"},
        {mr, 61440, 8192, kWindowAccess,
         "a bind past the end of the MR completes with IBV_WC_MW_BIND_ERR"},
        {mr, 0, 0, kWindowAccess,
         "a type 2 bind of length 0 completes with IBV_WC_MW_BIND_ERR"},
    };
    struct ibv_mw* w2 = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
    for (size_t i = 0; w2 != NULL && i < sizeof(bad_binds) / sizeof(bad_binds[0]);
         ++i) {
      if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
        struct ibv_send_wr wr = bind_wr(
            7300 + i, w2, ibv_inc_rkey(w2->rkey), bad_binds[i].region,
            mem + bad_binds[i].offset, bad_binds[i].len, bad_binds[i].access,
            IBV_SEND_SIGNALED);
        expect_local_error(&p, b, &wr, IBV_WC_MW_BIND_ERR, bad_binds[i].name);
      }
      free_pair(&p);
    }
    /* Bound twice without an invalidation between. */
    if (w2 != NULL && connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      const uint32_t key = ibv_inc_rkey(w2->rkey);
      int st = bind_type2(&p, w2, key, mr, mem, 64, kWindowAccess,
                          "BIND_MW of a second window");
      check(st == IBV_WC_SUCCESS, "a second type 2 window binds", "status %s",
            wc_name(st));
      struct ibv_send_wr wr = bind_wr(7310, w2, ibv_inc_rkey(key), mr, mem, 64,
                                      kWindowAccess, IBV_SEND_SIGNALED);
      expect_local_error(&p, b, &wr, IBV_WC_MW_BIND_ERR,
                         "binding a bound type 2 window again completes with "
                         "IBV_WC_MW_BIND_ERR");
    }
    free_pair(&p);
    /* LOCAL_INV of a key that is no type 2 window: an MR's. */
    if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      struct ibv_send_wr wr = local_inv_wr(7320, mr->rkey, IBV_SEND_SIGNALED);
      expect_local_error(&p, b, &wr, IBV_WC_LOC_QP_OP_ERR,
                         "LOCAL_INV of an MR's key completes with "
                         "IBV_WC_LOC_QP_OP_ERR");
    }
    free_pair(&p);
    /* Deallocated while bound: its key stops working at once. */
    if (w2 != NULL && connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      struct ibv_send_wr inv = local_inv_wr(7330, w2->rkey, IBV_SEND_SIGNALED);
      (void)post_once(&p.s[1], &inv, "LOCAL_INV (whatever its state)", &wc);
      const uint32_t key = ibv_inc_rkey(ibv_inc_rkey(w2->rkey));
      int st = bind_type2(&p, w2, key, mr, mem, 64, kWindowAccess,
                          "BIND_MW before deallocation");
      r = ibv_dealloc_mw(w2);
      w2 = NULL;
      st = write_through(&p, b, (uint64_t)(uintptr_t)mem, key, 64,
                         "WRITE through a deallocated window");
      check(r == 0 && st == IBV_WC_REM_ACCESS_ERR,
            "ibv_dealloc_mw of a bound window succeeds and its key stops "
            "working (IBV_WC_REM_ACCESS_ERR)",
            "dealloc %d, status %s", r, wc_name(st));
    }
    free_pair(&p);
    if (w2 != NULL) ibv_dealloc_mw(w2);
  }

  step("memory windows: type 1 (ibv_bind_mw), order, zero-based");
  {
    struct ibv_mw* w1 = ibv_alloc_mw(d->pd, IBV_MW_TYPE_1);
    check(w1 != NULL, "ibv_alloc_mw (type 1)", "errno %d", errno);
    if (w1 != NULL && connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      struct ibv_mw_bind mb;
      memset(&mb, 0, sizeof(mb));
      mb.wr_id = 7400;
      mb.send_flags = IBV_SEND_SIGNALED;
      mb.bind_info.mr = mr;
      mb.bind_info.addr = (uint64_t)(uintptr_t)(mem + 16384);
      mb.bind_info.length = 4096;
      mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
      const uint32_t before = w1->rkey;
      r = ibv_bind_mw(p.s[1].qp, w1, &mb);
      const int got = r == 0 ? wait_wcs(p.s[1].cq, &wc, 1, 10000) : 0;
      check(r == 0 && got == 1 && wc.wr_id == 7400 &&
                wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW &&
                w1->rkey == ibv_inc_rkey(before),
            "ibv_bind_mw of a type 1 window completes (IBV_WC_BIND_MW) and "
            "the window takes the next key",
            "returned %d, %d completions, status %s, key %#x from %#x", r, got,
            got ? wc_name(wc.status) : "none", w1->rkey, before);
      /* Any queue pair of the domain reaches a type 1 window. */
      struct pair q;
      if (connect_pair(&q, &kDefaultOpts, &kDefaultOpts)) {
        int st = write_through(&q, b, (uint64_t)(uintptr_t)(mem + 16384),
                               w1->rkey, 4096, "WRITE through a type 1 window");
        check(st == IBV_WC_SUCCESS &&
                  first_diff(mem + 16384, b->local, 4096) == 4096,
              "a type 1 window is reached through another queue pair of the "
              "domain",
              "status %s", wc_name(st));
      }
      free_pair(&q);
      /* ibv_bind_mw refuses what libibverbs and the man page refuse. */
      struct ibv_mw_bind zb = mb;
      zb.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
      r = ibv_bind_mw(p.s[1].qp, w1, &zb);
      check(r == EINVAL, "ibv_bind_mw of a zero-based type 1 window is EINVAL",
            "returned %d", r);
      struct ibv_mw* w2 = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
      r = w2 != NULL ? ibv_bind_mw(p.s[1].qp, w2, &mb) : -1;
      check(r == EINVAL, "ibv_bind_mw of a type 2 window is EINVAL",
            "returned %d", r);
      if (w2 != NULL) ibv_dealloc_mw(w2);
      struct ibv_pd* other = ibv_alloc_pd(d->ctx);
      struct ibv_mr* omr =
          other != NULL ? ibv_reg_mr(other, mem, 4096,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)
                        : NULL;
      struct ibv_mw_bind ob = mb;
      ob.bind_info.mr = omr;
      ob.bind_info.addr = (uint64_t)(uintptr_t)mem;
      r = omr != NULL ? ibv_bind_mw(p.s[1].qp, w1, &ob) : -1;
      check(r == EPERM,
            "ibv_bind_mw to an MR of another protection domain is EPERM",
            "returned %d", r);
      if (omr != NULL) ibv_dereg_mr(omr);
      if (other != NULL) ibv_dealloc_pd(other);
      /* Unsignaled: [WRITE, BIND, WRITE(signaled)] gives one completion;
       * the bind took effect before the second WRITE went out. */
      struct ibv_sge s1 = sge_of(b->remote, 64, b->rmr->lkey);
      struct ibv_send_wr wrs[3];
      wrs[0] = rdma_wr(IBV_WR_RDMA_WRITE, 7410, &s1, 1,
                       (uint64_t)(uintptr_t)b->local, b->lmr->rkey, 0);
      wrs[1] = bind_wr(7411, w1, ibv_inc_rkey(w1->rkey), mr, mem + 20480, 64,
                       IBV_ACCESS_REMOTE_READ, 0);
      wrs[2] = rdma_wr(IBV_WR_RDMA_WRITE, 7412, &s1, 1,
                       (uint64_t)(uintptr_t)b->local, b->lmr->rkey,
                       IBV_SEND_SIGNALED);
      wrs[0].next = &wrs[1];
      wrs[1].next = &wrs[2];
      struct ibv_send_wr* bad = NULL;
      r = ibv_post_send(p.s[1].qp, &wrs[0], &bad);
      struct ibv_wc w3[3];
      int n = r == 0 ? wait_wcs(p.s[1].cq, w3, 1, 10000) : 0;
      check(r == 0 && n == 1 && w3[0].wr_id == 7412 &&
                w3[0].status == IBV_WC_SUCCESS && extra_wcs(p.s[1].cq, 100) == 0,
            "[WRITE, BIND_MW, WRITE(signaled)]: one completion, the last",
            "post %d, %d completions, first %llu", r, n,
            n ? (unsigned long long)w3[0].wr_id : 0ull);
      /* All signaled: they complete in order, the bind between the WRITEs. */
      for (int i = 0; i < 3; ++i) wrs[i].send_flags = IBV_SEND_SIGNALED;
      wrs[1].bind_mw.rkey = ibv_inc_rkey(ibv_inc_rkey(w1->rkey));
      bad = NULL;
      r = ibv_post_send(p.s[1].qp, &wrs[0], &bad);
      n = r == 0 ? wait_wcs(p.s[1].cq, w3, 3, 10000) : 0;
      check(r == 0 && n == 3 && w3[0].wr_id == 7410 && w3[1].wr_id == 7411 &&
                w3[2].wr_id == 7412 && w3[1].opcode == IBV_WC_BIND_MW &&
                w3[0].status == IBV_WC_SUCCESS &&
                w3[1].status == IBV_WC_SUCCESS &&
                w3[2].status == IBV_WC_SUCCESS,
            "[WRITE, BIND_MW, WRITE], all signaled: three completions in "
            "order",
            "post %d, %d completions: %llu %llu %llu", r, n,
            n > 0 ? (unsigned long long)w3[0].wr_id : 0ull,
            n > 1 ? (unsigned long long)w3[1].wr_id : 0ull,
            n > 2 ? (unsigned long long)w3[2].wr_id : 0ull);
      /* [READ, LOCAL_INV] on a type 2 window: in order. */
      struct ibv_mw* w3w = ibv_alloc_mw(d->pd, IBV_MW_TYPE_2);
      if (w3w != NULL) {
        const uint32_t key = ibv_inc_rkey(w3w->rkey);
        int st = bind_type2(&p, w3w, key, mr, mem, 64,
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED,
                            "BIND_MW of a zero-based window");
        /* Zero-based: the peer names its first byte 0. */
        memset(mem, 0x5C, 64);
        struct ibv_sge rs = sge_of(b->local2, 64, b->lmr2->lkey);
        st = rdma_once(&p.s[0], IBV_WR_RDMA_READ, 7420, &rs, 1, 0, key,
                       "READ of a zero-based window at 0", NULL);
        check(st == IBV_WC_SUCCESS && all_bytes(b->local2, 64, 0x5C),
              "a zero-based window is addressed from 0", "status %s",
              wc_name(st));
        struct ibv_sge ls = sge_of(b->remote, 64, b->rmr->lkey);
        wrs[0] = rdma_wr(IBV_WR_RDMA_READ, 7421, &ls, 1,
                         (uint64_t)(uintptr_t)b->local, b->lmr->rkey,
                         IBV_SEND_SIGNALED);
        wrs[1] = local_inv_wr(7422, key, IBV_SEND_SIGNALED);
        wrs[0].next = &wrs[1];
        wrs[1].next = NULL;
        bad = NULL;
        r = ibv_post_send(p.s[1].qp, &wrs[0], &bad);
        n = r == 0 ? wait_wcs(p.s[1].cq, w3, 2, 10000) : 0;
        check(r == 0 && n == 2 && w3[0].wr_id == 7421 && w3[1].wr_id == 7422 &&
                  w3[0].status == IBV_WC_SUCCESS &&
                  w3[1].status == IBV_WC_SUCCESS &&
                  w3[1].opcode == IBV_WC_LOCAL_INV,
              "[READ, LOCAL_INV]: both complete, in order",
              "post %d, %d completions", r, n);
        r = ibv_dealloc_mw(w3w);
        check(r == 0, "ibv_dealloc_mw", "returned %d", r);
      }
    }
    free_pair(&p);
    if (w1 != NULL) {
      r = ibv_dealloc_mw(w1);
      check(r == 0, "ibv_dealloc_mw of a bound type 1 window", "returned %d",
            r);
    }
  }

  /* Everything unbound or gone: the regions go. */
  r = ibv_dealloc_mw(mw);
  check(r == 0, "ibv_dealloc_mw (type 2)", "returned %d", r);
  r = ibv_dereg_mr(mr);
  check(r == 0, "ibv_dereg_mr once no window is bound to it", "returned %d", r);
  dereg(nobind);
}

/* The peer QP destroyed: the next WRITE fails with the transport's error
 * once the retries run out, not as flushed -- the QP was not in error when
 * it was posted. A short ACK timeout (code 10: 4 ms) keeps that quick. */
static void t_peer_gone(struct bufs* b) {
  step("a WRITE to a destroyed peer QP");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.timeout = 10;
  if (connect_pair(&p, &o, &kDefaultOpts)) {
    free_side(&p.s[1]);
    struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
    struct ibv_send_wr w =
        rdma_wr(IBV_WR_RDMA_WRITE, 1250, &sge, 1, raddr(b, 0), b->rmr->rkey,
                IBV_SEND_SIGNALED);
    struct ibv_send_wr* bad = NULL;
    const double start = now_s();
    const int r = ibv_post_send(p.s[0].qp, &w, &bad);
    struct ibv_wc wc;
    const int got = r == 0 ? wait_wcs(p.s[0].cq, &wc, 1, 20000) : 0;
    check(got == 1 && wc.wr_id == 1250 && wc.status == IBV_WC_RETRY_EXC_ERR,
          "a WRITE to a destroyed peer QP completes with IBV_WC_RETRY_EXC_ERR",
          "post %d, %d completions, status %s after %.1f s", r, got,
          got ? wc_name(wc.status) : "none", now_s() - start);
    if (got == 1) {
      check_after_error(&p.s[0], b, "a WRITE to a destroyed peer QP");
    }
  }
  free_pair(&p);
}

static void t_local_errors(struct bufs* b) {
  step("local protection errors");
  /* A wrong lkey may be refused at the post (detected at once, bad_wr
   * names the WR) or complete with IBV_WC_LOC_PROT_ERR. */
  const char* names[2] = {
      "WRITE from a wrong lkey is refused or completes with "
      "IBV_WC_LOC_PROT_ERR",
      "READ into an MR without LOCAL_WRITE is refused or completes with "
      "IBV_WC_LOC_PROT_ERR"};
  uint8_t* ro = pages(65536);
  struct ibv_mr* romr = reg(&g_dev[0], ro, 65536, 0, "local read-only MR");
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && romr == NULL) break;
    struct pair p;
    if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      struct side* s = &p.s[0];
      struct ibv_sge sge =
          k == 0 ? sge_of(b->local, 4096, b->lmr->lkey ^ 0x777000u)
                 : sge_of(ro, 4096, romr->lkey);
      struct ibv_send_wr w =
          rdma_wr(k == 0 ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, 1200, &sge, 1,
                  raddr(b, 0), b->rmr->rkey, IBV_SEND_SIGNALED);
      struct ibv_send_wr* bad = NULL;
      memset(ro, 0x5C, 65536);
      const int r = ibv_post_send(s->qp, &w, &bad);
      struct ibv_wc wc;
      const int got = r == 0 ? wait_wcs(s->cq, &wc, 1, 10000) : 0;
      check((r != 0 && bad == &w) || (got == 1 && wc.wr_id == 1200 &&
                                      wc.status == IBV_WC_LOC_PROT_ERR),
            names[k], "post %d, %d completions, status %s", r, got,
            got ? wc_name(wc.status) : "none");
      if (k == 1) {
        check(all_bytes(ro, 65536, 0x5C),
              "the READ into a read-only MR changed nothing", "the MR changed");
      }
    }
    free_pair(&p);
  }
  dereg(romr);
}

/* ibv_modify_qp to ERR with WRs outstanding: every signaled WR completes,
 * those done before as successes, the rest flushed, in order. */
static void t_modify_to_err(struct bufs* b) {
  step("modify to ERR with work outstanding");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.max_send_wr = 64;
  if (connect_pair(&p, &o, &kDefaultOpts)) {
    struct side* s = &p.s[0];
    enum { kN = 64 };
    struct ibv_sge sge = sge_of(b->local, 1 << 20, b->lmr->lkey);
    struct ibv_send_wr wrs[kN];
    for (int i = 0; i < kN; ++i) {
      wrs[i] = rdma_wr(IBV_WR_RDMA_WRITE, 1300 + (uint64_t)i, &sge, 1,
                       raddr(b, (size_t)(i % 4) << 20), b->rmr->rkey,
                       IBV_SEND_SIGNALED);
      wrs[i].next = i < kN - 1 ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr* bad = NULL;
    int r = ibv_post_send(s->qp, &wrs[0], &bad);
    int m = to_state(s->qp, IBV_QPS_ERR);
    check(r == 0 && m == 0, "64 x 1 MiB WRITEs posted, then modify to ERR",
          "post %d modify %d", r, m);
    struct ibv_wc wc[kN];
    int got = wait_wcs(s->cq, wc, kN, 10000);
    int ok = 0, flushed = 0;
    bool ordered = true;
    for (int i = 0; i < got; ++i) {
      if (wc[i].wr_id != 1300 + (uint64_t)i) ordered = false;
      if (wc[i].status == IBV_WC_SUCCESS && flushed == 0) {
        ++ok;
      } else if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
        ++flushed;
      } else {
        ordered = false;
      }
    }
    check(got == kN && ordered && flushed > 0,
          "every outstanding WR completes: successes, then "
          "IBV_WC_WR_FLUSH_ERR, in order",
          "%d completions (%d successes, %d flushed), in order: %s", got, ok,
          flushed, ordered ? "yes" : "no");
    check(extra_wcs(s->cq, 100) == 0, "no completion twice",
          "extra completions");
    check_after_error(s, b, "modify to ERR");
  }
  free_pair(&p);
}

/* --- Memory registration ------------------------------------------------- */

/* ibv_rereg_mr(3): the same ibv_mr changes access, translation and PD; a
 * WRITE through its new rkey lands where the MR now is; what cannot be done
 * fails with IBV_REREG_MR_ERR_INPUT and leaves the MR as it was. */
static void t_rereg(struct bufs* b) {
  step("ibv_rereg_mr");
  struct pair p;
  if (!connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    free_pair(&p);
    return;
  }
  struct dev* target = &g_dev[1];
  uint8_t* first = pages(65536);
  uint8_t* second = pages(65536);
  struct ibv_mr* mr = reg(target, first, 65536, IBV_ACCESS_LOCAL_WRITE,
                          "rereg: a local-only MR");
  if (mr == NULL) {
    free_pair(&p);
    return;
  }
  struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
  fill(b->local, 4096, 41);
  int r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
  check(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
        "ibv_rereg_mr with no flags fails with IBV_REREG_MR_ERR_INPUT, EINVAL",
        "returned %d errno %d", r, errno);
  r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                   IBV_ACCESS_REMOTE_WRITE);
  check(r == IBV_REREG_MR_ERR_INPUT && mr->addr == first,
        "rereg to remote write without local write fails, the MR unchanged",
        "returned %d", r);
  struct ibv_mr* const same = mr;
  r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  check(r == 0 && mr == same, "ibv_rereg_mr CHANGE_ACCESS adds remote write",
        "returned %d errno %d", r, errno);
  int st = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1500, &sge, 1,
                     (uint64_t)(uintptr_t)first, mr->rkey, "rereg WRITE 1",
                     NULL);
  check(st == IBV_WC_SUCCESS && first_diff(b->local, first, 4096) == 4096,
        "a WRITE through the new rkey lands", "status %s", wc_name(st));
  fill(b->local, 4096, 42);
  r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, second, 65536,
                   0);
  check(r == 0 && mr->addr == second && mr->length == 65536,
        "ibv_rereg_mr CHANGE_TRANSLATION moves the MR", "returned %d", r);
  st = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1501, &sge, 1,
                 (uint64_t)(uintptr_t)second, mr->rkey, "rereg WRITE 2", NULL);
  check(st == IBV_WC_SUCCESS && first_diff(b->local, second, 4096) == 4096,
        "a WRITE lands in the MR's new place, with its remote access kept",
        "status %s", wc_name(st));
  struct ibv_pd* other = ibv_alloc_pd(target->ctx);
  if (other != NULL) {
    r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0);
    check(r == 0 && mr->pd == other, "ibv_rereg_mr CHANGE_PD", "returned %d",
          r);
    check(ibv_dealloc_pd(other) == EBUSY,
          "the new PD holds the MR (ibv_dealloc_pd: EBUSY)", "it did not");
  }
  check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr after rereg", "failed");
  if (other != NULL) {
    check(ibv_dealloc_pd(other) == 0, "then the PD goes", "it did not");
  }
  free_pair(&p);
}

static void t_memory(struct bufs* b) {
  step("memory registration");
  /* ibv_reg_mr(3): remote write (or atomic) needs local write. */
  uint8_t* m = pages(65536);
  errno = 0;
  struct ibv_mr* mr =
      ibv_reg_mr(g_dev[0].pd, m, 65536, IBV_ACCESS_REMOTE_WRITE);
  check(mr == NULL && errno == EINVAL,
        "REMOTE_WRITE without LOCAL_WRITE fails with EINVAL", "mr %p errno %d",
        (void*)mr, errno);
  if (mr != NULL) dereg(mr);
  errno = 0;
  mr = ibv_reg_mr(g_dev[0].pd, m, 65536, IBV_ACCESS_REMOTE_ATOMIC);
  check(mr == NULL && errno == EINVAL,
        "REMOTE_ATOMIC without LOCAL_WRITE fails with EINVAL", "mr %p errno %d",
        (void*)mr, errno);
  if (mr != NULL) dereg(mr);

  /* ibv_dereg_mr keeps the memory and what it holds. */
  fill(m, 65536, 19);
  uint8_t* copy = malloc(65536);
  memcpy(copy, m, 65536);
  mr = reg(&g_dev[0], m, 65536, kRemoteAccess, "MR to deregister");
  if (mr != NULL) {
    const int r = ibv_dereg_mr(mr);
    check(r == 0 && first_diff(copy, m, 65536) == 65536,
          "ibv_dereg_mr keeps the memory and its contents", "returned %d", r);
    m[0] ^= 0xFF;
    m[65535] ^= 0xFF;
    check(m[0] == (uint8_t)(copy[0] ^ 0xFF) &&
              m[65535] == (uint8_t)(copy[65535] ^ 0xFF),
          "the memory stays writable after ibv_dereg_mr", "write lost");
  }
  free(copy);

  /* Two MRs of one range, and one over part of another: each is its own
   * registration. */
  struct ibv_mr* a1 = ibv_reg_mr(g_dev[0].pd, m, 65536, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* a2 = ibv_reg_mr(g_dev[0].pd, m, 65536, IBV_ACCESS_LOCAL_WRITE);
  check(a1 != NULL && a2 != NULL, "one range registered twice", "errno %d",
        errno);
  if (a1 != NULL) dereg(a1);
  if (a2 != NULL) dereg(a2);

  /* An MR over a range that contains one registered before. */
  uint8_t* big = pages(1 << 20);
  fill(big, 1 << 20, 20);
  struct ibv_mr* part = ibv_reg_mr(g_dev[1].pd, big, 4096, kRemoteAccess);
  struct ibv_mr* whole = ibv_reg_mr(g_dev[1].pd, big, 1 << 20, kRemoteAccess);
  check(part != NULL && whole != NULL,
        "an MR over a range that contains an MR registered before",
        "first %p, second %p, errno %d", (void*)part, (void*)whole, errno);
  struct pair p;
  if (whole != NULL && connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    fill(b->local, 8192, 21);
    struct ibv_sge sge = sge_of(b->local, 8192, b->lmr->lkey);
    int st = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1400, &sge, 1,
                       (uint64_t)(uintptr_t)(big + 1000), whole->rkey,
                       "WRITE through the MR that contains another", NULL);
    check(
        st == IBV_WC_SUCCESS && first_diff(b->local, big + 1000, 8192) == 8192,
        "WRITE through the MR that contains another lands", "status %s",
        wc_name(st));
    free_pair(&p);
  }
  dereg(part);
  dereg(whole);

  /* Two buffers that share a page, as two malloc'd neighbours do. */
  uint8_t* nb = pages(3 * 4096);
  struct ibv_mr* n1 = ibv_reg_mr(g_dev[1].pd, nb + 100, 2000, kRemoteAccess);
  struct ibv_mr* n2 = ibv_reg_mr(g_dev[1].pd, nb + 3000, 5000, kRemoteAccess);
  check(n1 != NULL && n2 != NULL,
        "two MRs of neighbouring buffers that share a page",
        "first %p, second %p, errno %d", (void*)n1, (void*)n2, errno);
  dereg(n1);
  dereg(n2);

  /* One buffer registered with both devices: its pages are shared with
   * rdmaplane0's daemon, whose seal keeps any other process from mapping
   * them writable; rdmaplane1 refuses it with EINVAL and loses nothing
   * (docs/verbs.md). */
  uint8_t* both = pages(1 << 20);
  memset(both, 0, 1 << 20);
  struct ibv_mr* on0 = ibv_reg_mr(g_dev[0].pd, both, 1 << 20, kRemoteAccess);
  errno = 0;
  struct ibv_mr* on1 = ibv_reg_mr(g_dev[1].pd, both, 1 << 20, kRemoteAccess);
  check(on0 != NULL && on1 == NULL && errno == EINVAL,
        "one buffer registered with a second device is refused with EINVAL",
        "first %p, second %p, errno %d", (void*)on0, (void*)on1, errno);
  if (on0 != NULL && connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    /* rdmaplane1's QP writes into the buffer through rdmaplane0's rkey:
     * the refusal changed nothing. */
    uint8_t* src = pages(65536);
    fill(src, 65536, 22);
    struct ibv_mr* smr = reg(&g_dev[1], src, 65536, IBV_ACCESS_LOCAL_WRITE,
                             "source on rdmaplane1");
    if (smr != NULL) {
      struct ibv_sge sge = sge_of(src, 65536, smr->lkey);
      int st = rdma_once(
          &p.s[1], IBV_WR_RDMA_WRITE, 1401, &sge, 1, (uint64_t)(uintptr_t)both,
          on0->rkey, "WRITE into a buffer rdmaplane1 refused", NULL);
      check(st == IBV_WC_SUCCESS && first_diff(src, both, 65536) == 65536,
            "WRITE through rdmaplane0's MR of a buffer rdmaplane1 refused "
            "is seen",
            "status %s, first difference at %zu", wc_name(st),
            first_diff(src, both, 65536));
      dereg(smr);
    }
    free_pair(&p);
  }
  dereg(on0);
  dereg(on1);

}

/* Writes `len` bytes of b->local (filled from `seed`) from rdmaplane0 into
 * `dst` through `rkey` (rdmaplane1's), and reads them back into b->local2:
 * true when both complete and the bytes are the same in all three. */
static bool write_and_read_back(struct bufs* b, uint8_t* dst, size_t len,
                                uint32_t rkey, uint32_t seed,
                                const char* what) {
  struct pair p;
  if (!connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
    free_pair(&p);
    return false;
  }
  fill(b->local, len, seed);
  memset(b->local2, 0, len);
  struct ibv_sge src = sge_of(b->local, (uint32_t)len, b->lmr->lkey);
  struct ibv_sge back = sge_of(b->local2, (uint32_t)len, b->lmr2->lkey);
  const int w = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1500, &src, 1,
                          (uint64_t)(uintptr_t)dst, rkey, what, NULL);
  const int r = rdma_once(&p.s[0], IBV_WR_RDMA_READ, 1501, &back, 1,
                          (uint64_t)(uintptr_t)dst, rkey, what, NULL);
  const size_t landed = first_diff(b->local, dst, len);
  const size_t read = first_diff(b->local, b->local2, len);
  free_pair(&p);
  return check(w == IBV_WC_SUCCESS && r == IBV_WC_SUCCESS && landed == len &&
                   read == len,
               what,
               "WRITE %s, READ %s, first byte not landed %zu, not read back "
               "%zu (of %zu)",
               wc_name(w), wc_name(r), landed, read, len);
}

/* Registration caches (UCX's among them) register a range that grows over
 * MRs registered before, or bridges several; and applications free memory
 * and map new memory at the same addresses. ibv_reg_mr serves them all
 * (docs/verbs.md, "Memory registration"). */
static void t_growing_registrations(struct bufs* b) {
  step("registrations that grow, bridge and come back");
  /* A 32 MiB mapping: larger than 16 MiB, so each registration moves a
   * 2 MiB window of it, and a larger one later takes in both moved and
   * fresh pages. */
  const size_t len = 32u << 20, mib = 1u << 20;
  uint8_t* g = pages(len);
  fill(g, len, 40);
  uint8_t* before = malloc(len);
  memcpy(before, g, len);
  struct ibv_mr* small = reg(&g_dev[1], g + 3 * mib, 4096, kRemoteAccess,
                             "a 4 KiB MR inside a 32 MiB mapping");
  check(first_diff(before, g, len) == len,
        "registering moves pages and keeps every byte of the mapping",
        "first difference at %zu", first_diff(before, g, len));
  struct ibv_mr* grown = reg(&g_dev[1], g + 2 * mib + 4096, 4 * mib,
                             kRemoteAccess,
                             "an MR that grows over one registered before, "
                             "past its moved pages");
  check(first_diff(before, g, len) == len,
        "growing keeps every byte of the mapping", "first difference at %zu",
        first_diff(before, g, len));
  if (grown != NULL) {
    /* Across the pages moved first and those moved now. */
    write_and_read_back(b, g + 2 * mib + 4096, 4 * mib, grown->rkey, 41,
                        "WRITE and READ through the grown MR, across both "
                        "moves");
    write_and_read_back(b, g + 4 * mib - 100, 200, grown->rkey, 42,
                        "200 bytes across the boundary of two moves");
  }
  if (small != NULL) {
    write_and_read_back(b, g + 3 * mib, 4096, small->rkey, 43,
                        "the first MR still reaches its pages");
  }
  /* Two MRs far apart, then one that bridges them and the pages between. */
  struct ibv_mr* left = reg(&g_dev[1], g + 12 * mib, 8192, kRemoteAccess,
                            "the left MR to bridge");
  struct ibv_mr* right = reg(&g_dev[1], g + 20 * mib, 8192, kRemoteAccess,
                             "the right MR to bridge");
  struct ibv_mr* bridge = reg(&g_dev[1], g + 11 * mib, 11 * mib,
                              kRemoteAccess, "an MR that bridges two");
  if (bridge != NULL && left != NULL && right != NULL) {
    /* [11.5, 15.5) MiB, over the left MR's pages at 12 MiB. */
    write_and_read_back(b, g + 11 * mib + mib / 2, 4 * mib, bridge->rkey, 44,
                        "WRITE and READ through the bridging MR, over the "
                        "left MR's pages");
    write_and_read_back(b, g + 12 * mib, 8192, left->rkey, 45,
                        "the left MR reaches the same pages after the "
                        "bridge");
    /* [18, 22) MiB, over the right MR's pages at 20 MiB. */
    write_and_read_back(b, g + 18 * mib, 4 * mib, bridge->rkey, 46,
                        "WRITE and READ through the bridging MR, over the "
                        "right MR's pages");
    check(first_diff(g + 20 * mib, b->local + 2 * mib, 8192) == 8192,
          "the right MR's pages hold what the bridging MR wrote",
          "first difference at %zu",
          first_diff(g + 20 * mib, b->local + 2 * mib, 8192));
  }
  dereg(small);
  dereg(grown);
  dereg(left);
  dereg(right);
  dereg(bridge);
  free(before);

  /* A mapping unmapped while an MR of it lives, and a new one at the same
   * address: the new one registers, and the old MR keeps the old pages
   * (ibv_reg_mr(3): the MR holds its pages; the new mapping is other
   * memory). */
  const size_t olen = 1 << 20;
  uint8_t* first = mmap(NULL, olen, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(first, 0x11, olen);
  struct ibv_mr* old =
      reg(&g_dev[1], first, olen, kRemoteAccess, "MR of a mapping to unmap");
  munmap(first, olen);
  uint8_t* again = mmap(first, olen, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  memset(again, 0x5E, olen);
  struct ibv_mr* fresh =
      reg(&g_dev[1], again, olen, kRemoteAccess,
          "an MR of a new mapping where moved pages were unmapped");
  check(all_bytes(again, olen, 0x5E),
        "registering the new mapping keeps what was written there",
        "the new mapping changed");
  if (old != NULL && fresh != NULL) {
    struct pair p;
    if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
      fill(b->local, 65536, 50);
      struct ibv_sge sge = sge_of(b->local, 65536, b->lmr->lkey);
      const int st = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1502, &sge, 1,
                               (uint64_t)(uintptr_t)first, old->rkey,
                               "WRITE through the unmapped mapping's MR", NULL);
      check(st == IBV_WC_SUCCESS && all_bytes(again, olen, 0x5E),
            "a WRITE through the old MR lands in its own pages, not in the "
            "new mapping",
            "status %s", wc_name(st));
    }
    free_pair(&p);
    write_and_read_back(b, again + 4096, 65536, fresh->rkey, 51,
                        "WRITE and READ through the new mapping's MR");
  }
  dereg(old);
  dereg(fresh);
  /* Freed and allocated again through malloc, as applications do: a block
   * this large is a mapping of its own (above glibc's largest mmap
   * threshold), unmapped by free and mapped again, most often at the same
   * address, by the next malloc. */
  for (int round = 0; round < 3; ++round) {
    const size_t mlen = 40 * mib;
    uint8_t* m = malloc(mlen);
    memset(m, 0x60 + round, mlen);
    struct ibv_mr* mr = reg(&g_dev[1], m, mlen, kRemoteAccess,
                            "an MR of malloc'd memory, freed and allocated "
                            "again");
    if (mr != NULL) {
      write_and_read_back(b, m + 1000, 65536, mr->rkey, 52 + (uint32_t)round,
                          "WRITE and READ through an MR of malloc'd memory");
    }
    dereg(mr);
    free(m);
  }
}

/* Whether the page holding `p` is mapped. */
static bool mapped(const void* p) {
  return msync((void*)((uintptr_t)p & ~(uintptr_t)4095), 4096, MS_ASYNC) == 0;
}

/* A SysV segment of 32 MiB: created by this process, or, with `nobody`, by
 * a child running as user nobody (mode 0666), so that this process may
 * attach it but the daemon takes no segment of another user's. Its id. */
static int other_users_segment(size_t len, bool nobody) {
  if (!nobody) return shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    int id = -1;
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0666);
    }
    (void)!write(pipefd[1], &id, sizeof(id));
    _exit(0);
  }
  int id = -1;
  if (child < 0 || read(pipefd[0], &id, sizeof(id)) != sizeof(id)) id = -1;
  if (child > 0) waitpid(child, NULL, 0);
  close(pipefd[0]);
  close(pipefd[1]);
  return id;
}

/* SysV segments: ibv_reg_mr has the daemon attach a segment of the user's
 * own where it is (other processes attached to it keep sharing it), and
 * moves the pages of any other (docs/verbs.md); either way shmdt detaches
 * it as before (for moved pages the front end stands in for libc's), and
 * nothing of it stays mapped. */
static void t_sysv_segments(struct bufs* b) {
  step("SysV segments: registered where they are, or moved; shmdt");
  const size_t mib = 1u << 20;
  const bool root = geteuid() == 0;
  for (int moved = 0; moved < 2; ++moved) {
    if (moved && !root) {
      printf("    (not root: the segment of another user is not tried)\n");
      break;
    }
    const size_t len = 32 * mib;
    const size_t off = 12 * mib;
    const char* kind = moved ? "another user's (moved)" : "its own";
    const int id = other_users_segment(len, moved);
    uint8_t* seg = id < 0 ? (uint8_t*)-1 : shmat(id, NULL, 0);
    if (!check(seg != (uint8_t*)-1, "a SysV segment to register",
               "%s: shmget/shmat: errno %d", kind, errno)) {
      return;
    }
    shmctl(id, IPC_RMID, NULL);
    memset(seg, 0x33, len);
    struct ibv_mr* mr =
        reg(&g_dev[1], seg + off, 65536, kRemoteAccess, "MR of a SysV segment");
    if (mr != NULL) {
      write_and_read_back(b, seg + off, 65536, mr->rkey, 60 + (uint32_t)moved,
                          "WRITE and READ through an MR of a SysV segment");
      /* Another process attached to the segment sees what came: the same
       * pages, unless they moved. */
      const pid_t child = fork();
      if (child == 0) {
        const uint8_t* again = shmat(id, NULL, SHM_RDONLY);
        _exit(again != (const uint8_t*)-1 &&
                      memcmp(again + off, b->local, 65536) == 0
                  ? 0
                  : 1);
      }
      int status = -1;
      if (child > 0) waitpid(child, &status, 0);
      const bool shared = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      check(shared == !moved,
            moved ? "a moved segment's pages are no longer the segment's"
                  : "another process attached to the segment sees what the "
                    "WRITE put there",
            "%s: the other process %s", kind,
            shared ? "saw the bytes" : "did not see the bytes");
    }
    dereg(mr);
    errno = 0;
    int r = shmdt(seg);
    check(r == 0, "shmdt of a registered SysV segment succeeds",
          "%s: returned %d, errno %d", kind, r, errno);
    check(!mapped(seg) && !mapped(seg + off) && !mapped(seg + len - 1),
          "nothing of the detached segment stays mapped", "%s: %s%s%s", kind,
          mapped(seg) ? "its start " : "", mapped(seg + off) ? "the MR's " : "",
          mapped(seg + len - 1) ? "its end" : "");
    errno = 0;
    r = shmdt(seg);
    check(r == -1 && errno == EINVAL,
          "a second shmdt fails with EINVAL, as libc's does",
          "%s: returned %d, errno %d", kind, r, errno);
  }
}

/* The file behind a shared mapping holds `len` bytes of `want` at `at`:
 * read through the file, not through the mapping. */
static bool file_holds(int fd, off_t at, const uint8_t* want, size_t len) {
  uint8_t* back = malloc(len);
  if (back == NULL) return false;
  const ssize_t n = pread(fd, back, len, at);
  const bool same = n == (ssize_t)len && memcmp(back, want, len) == 0;
  free(back);
  return same;
}

/* Registers 64 KiB at `off` of the shared mapping `map` with rdmaplane1,
 * WRITEs and READs through it, and checks that the file (`fd`, or none: -1)
 * holds what came. */
static void registered_in_place(struct bufs* b, const char* kind,
                                uint8_t* map, size_t off, int fd,
                                uint32_t seed) {
  char what[160];
  snprintf(what, sizeof(what), "an MR of %s", kind);
  struct ibv_mr* mr = reg(&g_dev[1], map + off, 65536, kRemoteAccess, what);
  if (mr == NULL) return;
  snprintf(what, sizeof(what), "WRITE and READ through an MR of %s", kind);
  if (write_and_read_back(b, map + off, 65536, mr->rkey, seed, what) &&
      fd >= 0) {
    snprintf(what, sizeof(what), "the file of %s holds what the WRITE put "
             "there (its pages stayed the file's)", kind);
    check(file_holds(fd, (off_t)off, b->local, 65536), what,
          "the file differs from what was written");
  }
  dereg(mr);
}

/* Global data of the program (a private file mapping: .data for
 * initialised arrays) registers as heap memory does: its pages move onto
 * shared memory, what was there stays, and a write another thread makes
 * next to the buffer while it moves waits for the move instead of being
 * lost (rdma_server and rdma_client register static arrays). */
static uint8_t g_static_buffer[65536] = {1, 2, 3};
static volatile uint64_t g_static_neighbour = 7;
static atomic_bool g_static_stop;
static uint64_t g_static_increments;

static void* bump_neighbour(void* arg) {
  (void)arg;
  uint64_t n = 0;
  while (!atomic_load(&g_static_stop)) {
    g_static_neighbour = g_static_neighbour + 1;
    ++n;
  }
  g_static_increments = n;
  return NULL;
}

static volatile uint64_t* g_private_neighbour;

static void* bump_private(void* arg) {
  (void)arg;
  uint64_t n = 0;
  while (!atomic_load(&g_static_stop)) {
    *g_private_neighbour = *g_private_neighbour + 1;
    ++n;
  }
  g_static_increments = n;
  return NULL;
}

/* A file mapped MAP_PRIVATE moves too; with RDMAPLANE_NO_USERFAULTFD=1 the
 * move holds the window read-only instead (as where a seccomp filter
 * refuses userfaultfd), and the other thread's writes wait all the same. */
static void t_private_file_without_userfaultfd(struct bufs* b) {
  step("a private file mapping, moved without userfaultfd: nothing lost");
  char path[] = "/tmp/rdp-verbs-private.XXXXXX";
  const int fd = mkstemp(path);
  if (!check(fd >= 0 && ftruncate(fd, 4 * 65536) == 0, "a file to map",
             "errno %d", errno)) {
    if (fd >= 0) close(fd);
    return;
  }
  unlink(path);
  uint8_t* m = mmap(NULL, 4 * 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
                    0);
  close(fd);
  if (!check(m != MAP_FAILED, "map the file MAP_PRIVATE", "errno %d", errno)) {
    return;
  }
  memset(m, 0x5A, 4 * 65536);
  g_private_neighbour = (volatile uint64_t*)(m + 3 * 65536);
  *g_private_neighbour = 7;
  setenv("RDMAPLANE_NO_USERFAULTFD", "1", 1);
  atomic_store(&g_static_stop, false);
  pthread_t writer;
  const bool started = pthread_create(&writer, NULL, bump_private, NULL) == 0;
  struct ibv_mr* mr = reg(&g_dev[1], m, 65536, kRemoteAccess,
                          "an MR of a private file mapping, held read-only");
  atomic_store(&g_static_stop, true);
  if (started) pthread_join(writer, NULL);
  unsetenv("RDMAPLANE_NO_USERFAULTFD");
  check(started && *g_private_neighbour == 7 + g_static_increments,
        "every write the other thread made while the pages moved read-only "
        "is there",
        "the neighbour is %llu, 7 + %llu writes",
        (unsigned long long)*g_private_neighbour,
        (unsigned long long)g_static_increments);
  check(m[0] == 0x5A && m[65535] == 0x5A, "the mapping kept its contents",
        "%02x %02x", m[0], m[65535]);
  if (mr != NULL) {
    write_and_read_back(b, m, 65536, mr->rkey, 78,
                        "WRITE and READ through an MR of a private file "
                        "mapping");
    dereg(mr);
  }
  munmap(m, 4 * 65536);
}

static void t_static_memory(struct bufs* b) {
  step("global data of the program: registered, nothing lost");
  check(g_static_buffer[0] == 1 && g_static_buffer[2] == 3,
        "the global array holds its initial values", "%u %u",
        g_static_buffer[0], g_static_buffer[2]);
  atomic_store(&g_static_stop, false);
  pthread_t writer;
  const bool started = pthread_create(&writer, NULL, bump_neighbour, NULL) == 0;
  check(started, "a thread that writes next to the array", "failed");
  struct ibv_mr* mr =
      reg(&g_dev[1], g_static_buffer, sizeof(g_static_buffer), kRemoteAccess,
          "an MR of a global array (in the executable's .data)");
  atomic_store(&g_static_stop, true);
  if (started) pthread_join(writer, NULL);
  if (started) {
    check(g_static_neighbour == 7 + g_static_increments,
          "every write the other thread made next to the array while it "
          "moved is there",
          "the neighbour is %llu, 7 + %llu writes",
          (unsigned long long)g_static_neighbour,
          (unsigned long long)g_static_increments);
  }
  if (mr == NULL) return;
  check(g_static_buffer[0] == 1 && g_static_buffer[2] == 3,
        "the array kept its values through the registration", "%u %u",
        g_static_buffer[0], g_static_buffer[2]);
  write_and_read_back(b, g_static_buffer, sizeof(g_static_buffer), mr->rkey,
                      77, "WRITE and READ through an MR of a global array");
  dereg(mr);
}

/* Shared mappings of files -- memfds, POSIX shared memory, files on disk,
 * hugetlbfs, shared anonymous memory -- register where they are: the daemon
 * maps the same file (docs/verbs.md, "Memory registration"). */
static void t_shared_files(struct bufs* b) {
  step("shared file mappings: registered in place");
  const size_t mib = 1u << 20;
  /* A memfd, its descriptor kept. */
  int fd = memfd_create("rdp-conformance-file", MFD_CLOEXEC);
  if (check(fd >= 0 && ftruncate(fd, 4 * mib) == 0, "a memfd to map",
            "errno %d", errno)) {
    uint8_t* m =
        mmap(NULL, 4 * mib, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (check(m != MAP_FAILED, "map the memfd", "errno %d", errno)) {
      memset(m, 0x41, 4 * mib);
      registered_in_place(b, "a memfd's shared mapping", m, mib, fd, 70);
      munmap(m, 4 * mib);
    }
  }
  if (fd >= 0) close(fd);

  /* POSIX shared memory, its descriptor closed: found by its name. */
  char name[64];
  snprintf(name, sizeof(name), "/rdp-conformance-%d", (int)getpid());
  fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (check(fd >= 0 && ftruncate(fd, 2 * mib) == 0,
            "POSIX shared memory to map", "errno %d", errno)) {
    uint8_t* m =
        mmap(NULL, 2 * mib, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    fd = -1;
    if (check(m != MAP_FAILED, "map the POSIX shared memory", "errno %d",
              errno)) {
      memset(m, 0x42, 2 * mib);
      const int again = shm_open(name, O_RDONLY, 0);
      registered_in_place(b, "POSIX shared memory (its descriptor closed)",
                          m, 64 * 1024, again, 71);
      if (again >= 0) close(again);
      munmap(m, 2 * mib);
    }
    shm_unlink(name);
  }
  if (fd >= 0) close(fd);

  /* A file on disk, unlinked, its descriptor kept: the file keeps what
   * was written there, through the mapping and through the MR. */
  char path[] = "/tmp/rdp-verbs-conformance.XXXXXX";
  fd = mkstemp(path);
  if (check(fd >= 0 && ftruncate(fd, 65536 * 2) == 0, "a file to map",
            "errno %d", errno)) {
    unlink(path);
    uint8_t* fm =
        mmap(NULL, 65536 * 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (check(fm != MAP_FAILED, "map the file", "errno %d", errno)) {
      fill(fm, 65536 * 2, 27);
      registered_in_place(b, "a file's shared mapping", fm, 65536, fd, 72);
      uint8_t* first = pages(65536);
      fill(first, 65536, 27);
      check(file_holds(fd, 0, first, 65536),
            "the file keeps what was written through its mapping",
            "its first 64 KiB differ");
      munmap(fm, 65536 * 2);
    }
  }
  if (fd >= 0) close(fd);

  /* Hugetlbfs: a hugetlb memfd, where hugepages are free. Mapped where a
   * small file was registered and unmapped before, inside the hugepage but
   * outside the MR: what is remembered of that one must not cut the
   * hugetlb mapping's share short of whole hugepages. */
  uint8_t* reserved = mmap(NULL, 4 * mib, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  uint8_t* at = reserved == MAP_FAILED
                    ? NULL
                    : (uint8_t*)(((uintptr_t)reserved + 2 * mib - 1) &
                                 ~(uintptr_t)(2 * mib - 1));
  fd = memfd_create("rdp-conformance-small", MFD_CLOEXEC);
  if (at != NULL && fd >= 0 && ftruncate(fd, 65536) == 0 &&
      mmap(at, 65536, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) ==
          at) {
    struct ibv_mr* small =
        reg(&g_dev[1], at, 65536, kRemoteAccess, "an MR of a small file");
    dereg(small);
    munmap(at, 65536);
  }
  if (fd >= 0) close(fd);
  fd = memfd_create("rdp-conformance-huge", MFD_CLOEXEC | MFD_HUGETLB);
  uint8_t* hm = MAP_FAILED;
  if (at != NULL && fd >= 0 && ftruncate(fd, 2 * mib) == 0) {
    hm = mmap(at, 2 * mib, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
              0);
  }
  if (hm != MAP_FAILED) {
    memset(hm, 0x43, 2 * mib);
    registered_in_place(b, "a hugetlb memfd's shared mapping", hm, mib, -1,
                        73);
    /* Read through a second mapping of the file (hugetlbfs has no
     * pread). */
    uint8_t* again =
        mmap(NULL, 2 * mib, PROT_READ, MAP_SHARED, fd, 0);
    if (again != MAP_FAILED) {
      check(memcmp(again + mib, b->local, 65536) == 0,
            "another mapping of the hugetlb file sees what the WRITE put "
            "there",
            "it differs");
      munmap(again, 2 * mib);
    }
  } else {
    printf("    (no free hugepage: the hugetlbfs case is not tried)\n");
  }
  if (reserved != MAP_FAILED) munmap(reserved, 4 * mib);
  if (fd >= 0) close(fd);

  /* Shared anonymous memory: its file is reachable only through
   * /proc/self/map_files, which the kernel opens for root alone. */
  uint8_t* anon = mmap(NULL, mib, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (check(anon != MAP_FAILED, "shared anonymous memory", "errno %d",
            errno)) {
    memset(anon, 0x44, mib);
    if (geteuid() == 0) {
      registered_in_place(b, "shared anonymous memory", anon, 64 * 1024, -1,
                          74);
    } else {
      errno = 0;
      struct ibv_mr* mr =
          ibv_reg_mr(g_dev[1].pd, anon, 65536, kRemoteAccess);
      check(mr == NULL && errno == EINVAL,
            "not root: an MR of shared anonymous memory is refused with "
            "EINVAL",
            "mr %p errno %d", (void*)mr, errno);
      dereg(mr);
    }
    munmap(anon, mib);
  }

  /* A file that shrinks under its MR: the daemon lives, the peer's WRITE
   * completes, the range cannot be registered again, and others go on. */
  fd = memfd_create("rdp-conformance-shrinks", MFD_CLOEXEC);
  uint8_t* sm = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, mib) == 0) {
    sm = mmap(NULL, mib, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (check(sm != MAP_FAILED, "a memfd that will shrink", "errno %d",
            errno)) {
    memset(sm, 0x45, mib);
    struct ibv_mr* mr =
        reg(&g_dev[1], sm, 65536, kRemoteAccess, "an MR of a memfd");
    if (mr != NULL && ftruncate(fd, 0) == 0) {
      /* From now on this process would die touching `sm` itself. */
      struct pair p;
      if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
        fill(b->local, 65536, 75);
        struct ibv_sge src = sge_of(b->local, 65536, b->lmr->lkey);
        const int w = rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 1510, &src, 1,
                                (uint64_t)(uintptr_t)sm, mr->rkey,
                                "WRITE into a file that shrank", NULL);
        check(w >= 0, "a WRITE into a file that shrank under its MR completes",
              "no completion");
      }
      free_pair(&p);
      errno = 0;
      struct ibv_mr* again =
          ibv_reg_mr(g_dev[1].pd, sm, 65536, kRemoteAccess);
      check(again == NULL && errno == EFAULT,
            "the range of a file that shrank cannot be registered again "
            "(EFAULT)",
            "mr %p errno %d", (void*)again, errno);
      dereg(again);
      uint8_t* plain = pages(65536);
      struct ibv_mr* pmr =
          reg(&g_dev[1], plain, 65536, kRemoteAccess, "an MR after the loss");
      if (pmr != NULL) {
        write_and_read_back(b, plain, 65536, pmr->rkey, 76,
                            "the daemon serves on after a file shrank");
      }
      dereg(pmr);
    }
    dereg(mr);
    munmap(sm, mib);
  }
  if (fd >= 0) close(fd);
}

/* A SysV segment on hugepages (perftest's --use_hugepages, UCX's memory
 * pools) is attached by the daemon where it is, like one on 4 KiB pages:
 * another process attached to it sees what came, and libc's own shmdt
 * detaches it. */
static void t_sysv_hugepages(struct bufs* b) {
  step("SysV segments on hugepages: registered where they are");
  const size_t len = 4u << 20;
  const int id = shmget(IPC_PRIVATE, len, IPC_CREAT | SHM_HUGETLB | 0600);
  uint8_t* seg = id < 0 ? (uint8_t*)-1 : shmat(id, NULL, 0);
  if (id >= 0) shmctl(id, IPC_RMID, NULL);
  if (seg == (uint8_t*)-1) {
    printf("    (no free hugepages: not tried)\n");
    return;
  }
  memset(seg, 0x36, len);
  struct ibv_mr* mr = reg(&g_dev[1], seg + (2u << 20), 65536, kRemoteAccess,
                          "MR of a SysV segment on hugepages");
  if (mr != NULL &&
      write_and_read_back(b, seg + (2u << 20), 65536, mr->rkey, 66,
                          "WRITE and READ through an MR of a SysV segment "
                          "on hugepages")) {
    const pid_t child = fork();
    if (child == 0) {
      const uint8_t* again = shmat(id, NULL, SHM_RDONLY);
      _exit(again != (const uint8_t*)-1 &&
                    memcmp(again + (2u << 20), b->local, 65536) == 0
                ? 0
                : 1);
    }
    int status = -1;
    if (child > 0) waitpid(child, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "another process attached to the hugepage segment sees what the "
          "WRITE put there",
          "it did not (status %d)", status);
  }
  dereg(mr);
  /* libc's, not the front end's stand-in: as UCX's memory hooks call it. */
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  int (*libc_shmdt)(const void*) = NULL;
  if (libc != NULL) {
    void* sym = dlvsym(libc, "shmdt", "GLIBC_2.2.5");
    memcpy(&libc_shmdt, &sym, sizeof(sym));
  }
  errno = 0;
  const int r = libc_shmdt != NULL ? libc_shmdt(seg) : -2;
  check(r == 0 && !mapped(seg) && !mapped(seg + len - 1),
        "libc's own shmdt detaches a registered hugepage segment",
        "returned %d, errno %d, %s", r, errno,
        mapped(seg) ? "still mapped" : "unmapped");
}

/* --- Not served ---------------------------------------------------------- */

static void t_unsupported(void) {
  step("unsupported verbs return EOPNOTSUPP");
  struct dev* d = &g_dev[0];
  struct ibv_cq* cq = ibv_create_cq(d->ctx, 16, NULL, NULL, 0);
  if (cq == NULL) return;
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RAW_PACKET;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  errno = 0;
  struct ibv_qp* qp = ibv_create_qp(d->pd, &init);
  check(qp == NULL && errno == EOPNOTSUPP,
        "a raw packet QP fails with EOPNOTSUPP",
        "qp %p errno %d", (void*)qp, errno);
  if (qp != NULL) ibv_destroy_qp(qp);

  /* Verbs reached only through libibverbs' own code before: each must be
   * answered here, not by libibverbs (which reads a provider's private
   * data next to the context and crashed). */
  errno = 0;
  struct ibv_mr* dmabuf = ibv_reg_dmabuf_mr(d->pd, 0, 4096, 0, -1,
                                            IBV_ACCESS_LOCAL_WRITE);
  check(dmabuf == NULL && errno == EOPNOTSUPP,
        "ibv_reg_dmabuf_mr fails with EOPNOTSUPP", "mr %p errno %d",
        (void*)dmabuf, errno);
  errno = 0;
  struct ibv_context* imported = ibv_import_device(-1);
  check(imported == NULL && errno == EOPNOTSUPP,
        "ibv_import_device fails with EOPNOTSUPP", "context %p errno %d",
        (void*)imported, errno);
  {
    struct ibv_qp_init_attr rc;
    memset(&rc, 0, sizeof(rc));
    rc.send_cq = cq;
    rc.recv_cq = cq;
    rc.qp_type = IBV_QPT_RC;
    rc.cap.max_send_wr = 4;
    rc.cap.max_recv_wr = 4;
    rc.cap.max_send_sge = 1;
    rc.cap.max_recv_sge = 1;
    struct ibv_qp* rcqp = ibv_create_qp(d->pd, &rc);
    if (check(rcqp != NULL, "an RC QP for the ECE checks", "errno %d",
              errno)) {
      struct ibv_ece ece;
      memset(&ece, 0, sizeof(ece));
      int r = ibv_query_ece(rcqp, &ece);
      check(r == EOPNOTSUPP, "ibv_query_ece fails with EOPNOTSUPP",
            "returned %d", r);
      r = ibv_set_ece(rcqp, &ece);
      check(r == EOPNOTSUPP, "ibv_set_ece fails with EOPNOTSUPP",
            "returned %d", r);
      ibv_destroy_qp(rcqp);
    }
  }

  ibv_destroy_cq(cq);
}

/* Every verb of a libibverbs man page that is not served answers with the
 * errno its page (or <infiniband/verbs.h>, for the inline ones) gives, as
 * docs/verbs.md's list says: none crashes, none reaches libibverbs. */
static void t_man_page_refusals(void) {
  step("the man pages' verbs that are not served");
  struct dev* d = &g_dev[0];
  struct ibv_context* c = d->ctx;
  struct ibv_cq* cq = ibv_create_cq(c, 16, NULL, NULL, 0);
  struct ibv_srq_init_attr sa;
  memset(&sa, 0, sizeof(sa));
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  struct ibv_srq* srq = ibv_create_srq(d->pd, &sa);
  struct ibv_qp_init_attr qi;
  memset(&qi, 0, sizeof(qi));
  qi.send_cq = qi.recv_cq = cq;
  qi.qp_type = IBV_QPT_RC;
  qi.cap.max_send_wr = qi.cap.max_recv_wr = 4;
  qi.cap.max_send_sge = qi.cap.max_recv_sge = 1;
  struct ibv_qp* qp = cq != NULL ? ibv_create_qp(d->pd, &qi) : NULL;
  if (!check(cq != NULL && srq != NULL && qp != NULL,
             "a CQ, an SRQ and a QP to ask about", "errno %d", errno)) {
    if (qp != NULL) ibv_destroy_qp(qp);
    if (srq != NULL) ibv_destroy_srq(srq);
    if (cq != NULL) ibv_destroy_cq(cq);
    return;
  }
  /* Verbs that return a pointer: NULL with errno EOPNOTSUPP. */
  struct ibv_td_init_attr td;
  memset(&td, 0, sizeof(td));
  struct ibv_parent_domain_init_attr pda;
  memset(&pda, 0, sizeof(pda));
  pda.pd = d->pd;
  struct ibv_xrcd_init_attr xa;
  memset(&xa, 0, sizeof(xa));
  xa.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  xa.fd = -1;
  xa.oflags = O_CREAT;
  struct ibv_qp_open_attr oa;
  memset(&oa, 0, sizeof(oa));
  struct ibv_srq_init_attr_ex sx;
  memset(&sx, 0, sizeof(sx));
  sx.attr.max_wr = 4;
  sx.attr.max_sge = 1;
  sx.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
  sx.pd = d->pd;
  sx.srq_type = IBV_SRQT_XRC;
  struct ibv_wq_init_attr wa;
  memset(&wa, 0, sizeof(wa));
  struct ibv_rwq_ind_table_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  struct ibv_counters_init_attr ca;
  memset(&ca, 0, sizeof(ca));
  struct ibv_alloc_dm_attr da;
  memset(&da, 0, sizeof(da));
  da.length = 4096;
  struct ibv_flow_action_esp_attr ea;
  memset(&ea, 0, sizeof(ea));
  struct {
    struct ibv_flow_attr attr;
    struct ibv_flow_spec_eth eth;
  } flow;
  memset(&flow, 0, sizeof(flow));
  flow.attr.size = sizeof(flow);
  flow.attr.num_of_specs = 1;
  flow.attr.port = 1;
  flow.eth.type = IBV_FLOW_SPEC_ETH;
  flow.eth.size = sizeof(flow.eth);
#define REFUSED_POINTER(expr)                                             \
  do {                                                                    \
    errno = 0;                                                            \
    const void* got_ = (const void*)(expr);                               \
    check(got_ == NULL && errno == EOPNOTSUPP, #expr " fails with EOPNOTSUPP", \
          "returned %p, errno %d", got_, errno);                          \
  } while (0)
  REFUSED_POINTER(ibv_alloc_td(c, &td));
  REFUSED_POINTER(ibv_alloc_parent_domain(c, &pda));
  REFUSED_POINTER(ibv_open_xrcd(c, &xa));
  REFUSED_POINTER(ibv_open_qp(c, &oa));
  REFUSED_POINTER(ibv_create_srq_ex(c, &sx));
  REFUSED_POINTER(ibv_create_wq(c, &wa));
  REFUSED_POINTER(ibv_create_rwq_ind_table(c, &ia));
  REFUSED_POINTER(ibv_create_counters(c, &ca));
  REFUSED_POINTER(ibv_alloc_dm(c, &da));
#undef REFUSED_POINTER
  errno = 0;
  struct ibv_mr* null_mr = ibv_alloc_null_mr(d->pd);
  check(null_mr == NULL && errno == EOPNOTSUPP,
        "ibv_alloc_null_mr fails with EOPNOTSUPP", "mr %p errno %d",
        (void*)null_mr, errno);
  errno = 0;
  struct ibv_flow_action* fa = ibv_create_flow_action_esp(c, &ea);
  check(fa == NULL && errno == EOPNOTSUPP,
        "ibv_create_flow_action_esp fails with EOPNOTSUPP", "%p errno %d",
        (void*)fa, errno);
  errno = 0;
  struct ibv_flow* fl = ibv_create_flow(qp, &flow.attr);
  check(fl == NULL && errno == EOPNOTSUPP,
        "ibv_create_flow fails with EOPNOTSUPP", "%p errno %d", (void*)fl,
        errno);
  /* ... and those that return an errno. */
  uint32_t srq_num = 0;
  int r = ibv_get_srq_num(srq, &srq_num);
  check(r == EOPNOTSUPP, "ibv_get_srq_num (no XRC) is EOPNOTSUPP",
        "returned %d", r);
  struct ibv_modify_cq_attr mc;
  memset(&mc, 0, sizeof(mc));
  mc.attr_mask = IBV_CQ_ATTR_MODERATE;
  r = ibv_modify_cq(cq, &mc);
  check(r == EOPNOTSUPP, "ibv_modify_cq is EOPNOTSUPP", "returned %d", r);
  struct ibv_values_ex vx;
  memset(&vx, 0, sizeof(vx));
  vx.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  r = ibv_query_rt_values_ex(c, &vx);
  check(r == EOPNOTSUPP, "ibv_query_rt_values_ex is EOPNOTSUPP",
        "returned %d", r);
  struct ibv_qp_rate_limit_attr rl;
  memset(&rl, 0, sizeof(rl));
  r = ibv_modify_qp_rate_limit(qp, &rl);
  check(r == EOPNOTSUPP, "ibv_modify_qp_rate_limit is EOPNOTSUPP",
        "returned %d", r);
  struct ibv_sge sg;
  memset(&sg, 0, sizeof(sg));
  r = ibv_advise_mr(d->pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1);
  check(r == EOPNOTSUPP, "ibv_advise_mr is EOPNOTSUPP", "returned %d", r);
  struct ibv_ops_wr ow;
  memset(&ow, 0, sizeof(ow));
  struct ibv_ops_wr* bad_ow = NULL;
  r = ibv_post_srq_ops(srq, &ow, &bad_ow);
  check(r == EOPNOTSUPP, "ibv_post_srq_ops (tag matching) is EOPNOTSUPP",
        "returned %d", r);
  union ibv_gid mgid;
  memset(&mgid, 0, sizeof(mgid));
  mgid.raw[0] = 0xFF;
  r = ibv_attach_mcast(qp, &mgid, 0);
  check(r == EOPNOTSUPP, "ibv_attach_mcast is EOPNOTSUPP", "returned %d", r);
  r = ibv_detach_mcast(qp, &mgid, 0);
  check(r == EOPNOTSUPP, "ibv_detach_mcast is EOPNOTSUPP", "returned %d", r);
  errno = 0;
  struct ibv_pd* ipd = ibv_import_pd(c, 1);
  struct ibv_mr* imr = ibv_import_mr(d->pd, 1);
  check(ipd == NULL && imr == NULL && errno == EOPNOTSUPP,
        "ibv_import_pd and ibv_import_mr fail with EOPNOTSUPP",
        "%p %p errno %d", (void*)ipd, (void*)imr, errno);
  r = ibv_query_qp_data_in_order(qp, IBV_WR_RDMA_WRITE, 0);
  check(r == 0,
        "ibv_query_qp_data_in_order promises nothing beyond completions (0)",
        "returned %d", r);
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof(aa));
  uint8_t mac[6];
  uint16_t vid = 0;
  errno = 0;
  r = ibv_resolve_eth_l2_from_gid(c, &aa, mac, &vid);
  check(r == EOPNOTSUPP && errno == EOPNOTSUPP,
        "ibv_resolve_eth_l2_from_gid is EOPNOTSUPP", "returned %d errno %d", r,
        errno);
  /* An SRQ of the basic type through ibv_create_srq_ex is ibv_create_srq's
   * (verbs.h sends it there). */
  sx.srq_type = IBV_SRQT_BASIC;
  struct ibv_srq* basic = ibv_create_srq_ex(c, &sx);
  check(basic != NULL, "ibv_create_srq_ex of a basic SRQ with a PD",
        "errno %d", errno);
  if (basic != NULL) ibv_destroy_srq(basic);
  ibv_destroy_qp(qp);
  ibv_destroy_srq(srq);
  ibv_destroy_cq(cq);
}

/* --- Completion events --------------------------------------------------- */

/* A thread blocked in ibv_get_cq_event. */
struct waiter {
  pthread_t thread;
  struct ibv_comp_channel* channel;
  struct ibv_cq* cq;
  void* cq_context;
  int ret;
  atomic_int done;
};

static void* waiter_main(void* arg) {
  struct waiter* w = arg;
  w->ret = ibv_get_cq_event(w->channel, &w->cq, &w->cq_context);
  atomic_store(&w->done, 1);
  return NULL;
}

static bool waiter_start(struct waiter* w, struct ibv_comp_channel* channel) {
  memset(w, 0, sizeof(*w));
  w->channel = channel;
  atomic_init(&w->done, 0);
  return pthread_create(&w->thread, NULL, waiter_main, w) == 0;
}

/* Whether the waiter returned within ms; joins it when it did. */
static bool waiter_done_within(struct waiter* w, int ms) {
  const double until = now_s() + ms / 1000.0;
  while (!atomic_load(&w->done) && now_s() < until) sleep_us(1000);
  if (!atomic_load(&w->done)) return false;
  pthread_join(w->thread, NULL);
  return true;
}

static int post_write(struct side* s, struct bufs* b, uint64_t wr_id,
                      uint32_t rkey) {
  struct ibv_sge sge = sge_of(b->local, 4096, b->lmr->lkey);
  struct ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, wr_id, &sge, 1, raddr(b, 0),
                                 rkey, IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  return ibv_post_send(s->qp, &w, &bad);
}

static void t_events(struct bufs* b) {
  step("completion events");
  struct pair p;
  struct qp_opts o = kDefaultOpts;
  o.channel = true;
  if (!connect_pair(&p, &o, &kDefaultOpts)) {
    free_pair(&p);
    return;
  }
  struct side* s = &p.s[0];
  struct ibv_wc wc;

  int r = ibv_req_notify_cq(s->cq, 0);
  check(r == 0, "ibv_req_notify_cq", "returned %d", r);
  fill(b->local, 4096, 24);
  memset(b->remote, 0, 4096);
  r = post_write(s, b, 1500, b->rmr->rkey);
  /* ibv_get_cq_event(3)'s non-blocking example: the channel's fd polls
   * readable once an event is there. */
  struct pollfd pfd = {s->channel->fd, POLLIN, 0};
  const int pr = poll(&pfd, 1, 2000);
  check(pr == 1 && (pfd.revents & POLLIN) != 0,
        "the completion channel's fd becomes readable with an event (poll)",
        "poll returned %d, revents %#x after 2 s", pr, pfd.revents);
  struct ibv_cq* ev_cq = NULL;
  void* ev_ctx = NULL;
  r = ibv_get_cq_event(s->channel, &ev_cq, &ev_ctx);
  check(r == 0 && ev_cq == s->cq && ev_ctx == s,
        "ibv_get_cq_event returns the CQ and its context", "returned %d", r);
  ibv_ack_cq_events(s->cq, 1);
  int got = wait_wcs(s->cq, &wc, 1, 10000);
  check(got == 1 && wc.wr_id == 1500 && wc.status == IBV_WC_SUCCESS &&
            first_diff(b->local, b->remote, 4096) == 4096,
        "the WRITE that raised the event is polled, data in place",
        "%d completions", got);

  /* One shot: without a new ibv_req_notify_cq, a new completion raises no
   * event. */
  struct waiter w;
  if (!waiter_start(&w, s->channel)) {
    check(false, "a thread waiting in ibv_get_cq_event",
          "pthread_create failed");
    free_pair(&p);
    return;
  }
  /* The completion is left in the CQ while the waiter could see it. */
  r = post_write(s, b, 1501, b->rmr->rkey);
  bool ev = waiter_done_within(&w, 300);
  got = wait_wcs(s->cq, &wc, 1, 10000);
  check(r == 0 && got == 1 && !ev,
        "no event without a new ibv_req_notify_cq (one shot)",
        "post %d, %d completions, event %s", r, got, ev ? "delivered" : "none");

  /* solicited_only: a successful send completion is not solicited. */
  if (!atomic_load(&w.done)) {
    r = ibv_req_notify_cq(s->cq, 1);
    int r2 = post_write(s, b, 1502, b->rmr->rkey);
    ev = waiter_done_within(&w, 300);
    got = wait_wcs(s->cq, &wc, 1, 10000);
    check(r == 0 && r2 == 0 && got == 1 && !ev,
          "solicited_only: a successful WRITE raises no event",
          "notify %d post %d, %d completions, event %s", r, r2, got,
          ev ? "delivered" : "none");
  }
  if (!atomic_load(&w.done)) {
    r = ibv_req_notify_cq(s->cq, 0);
    int r2 = post_write(s, b, 1503, b->rmr->rkey);
    check(r == 0 && r2 == 0 && waiter_done_within(&w, 5000) && w.ret == 0 &&
              w.cq == s->cq,
          "after a new ibv_req_notify_cq the next completion raises the event",
          "notify %d post %d, event %s", r, r2,
          atomic_load(&w.done) ? "delivered" : "none within 5 s");
    if (!atomic_load(&w.done)) {
      /* The thread stays blocked: leave the pair as it is. */
      return;
    }
  } else {
    pthread_join(w.thread, NULL);
  }
  ibv_ack_cq_events(s->cq, 1);
  while (ibv_poll_cq(s->cq, 1, &wc) > 0) {
  }

  /* An error completion is solicited. */
  if (waiter_start(&w, s->channel)) {
    r = ibv_req_notify_cq(s->cq, 1);
    int r2 = post_write(s, b, 1504, b->rmr->rkey ^ 0x5A5A00u);
    ev = waiter_done_within(&w, 5000);
    check(r == 0 && r2 == 0 && ev && w.ret == 0,
          "solicited_only: an error completion raises the event",
          "notify %d post %d, event %s", r, r2,
          ev ? "delivered" : "none within 5 s");
    if (!ev) return; /* the thread stays blocked */
    ibv_ack_cq_events(s->cq, 1);
    got = wait_wcs(s->cq, &wc, 1, 10000);
    check(got == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
          "the event's completion is the error", "%d completions, status %s",
          got, got ? wc_name(wc.status) : "none");
  }
  free_pair(&p);
}

/* --- SEND and RECV ------------------------------------------------------- */

/* Receives of the two-sided checks: on rdmaplane1, in the remote buffer
 * (registered with local write), each in an area of its own. */
enum { kArea = 256 * 1024 };

static uint8_t* area(const struct bufs* b, int i) {
  return b->remote + (size_t)i * kArea;
}

static struct ibv_recv_wr recv_wr(uint64_t wr_id, struct ibv_sge* sge,
                                  int num_sge) {
  struct ibv_recv_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  return wr;
}

/* Posts one receive of num_sge SGEs; ibv_post_recv's result. */
static int post_recv1(struct side* s, uint64_t wr_id, struct ibv_sge* sge,
                      int num_sge) {
  struct ibv_recv_wr wr = recv_wr(wr_id, sge, num_sge);
  struct ibv_recv_wr* bad = NULL;
  return ibv_post_recv(s->qp, &wr, &bad);
}

/* One receive of `len` bytes at the start of area i. */
static int post_recv_area(struct side* s, struct bufs* b, int i,
                          uint64_t wr_id, uint32_t len) {
  struct ibv_sge sge = sge_of(area(b, i), len, b->rmr->lkey);
  return post_recv1(s, wr_id, &sge, 1);
}

/* Posts one signaled SEND (or SEND_WITH_IMM) of `len` bytes from
 * rdmaplane0's local buffer at `offset`; ibv_post_send's result. */
static int post_send1(struct side* s, struct bufs* b, enum ibv_wr_opcode op,
                      uint64_t wr_id, size_t offset, uint32_t len,
                      unsigned flags, uint32_t imm) {
  struct ibv_sge sge = sge_of(b->local + offset, len, b->lmr->lkey);
  struct ibv_send_wr wr =
      rdma_wr(op, wr_id, &sge, len != 0 ? 1 : 0, 0, 0,
              IBV_SEND_SIGNALED | flags);
  wr.imm_data = imm;
  struct ibv_send_wr* bad = NULL;
  return ibv_post_send(s->qp, &wr, &bad);
}

/* The bytes of area i as a receive of SGEs sge[0, n) leaves them after
 * `data` of `len` bytes was scattered over them: everything else 0xEE.
 * Returns the first offset in the area that differs, or kArea. */
static size_t scatter_diff(const struct bufs* b, int i,
                           const struct ibv_sge* sge, int n,
                           const uint8_t* data, size_t len) {
  static uint8_t want[kArea];
  memset(want, 0xEE, sizeof(want));
  const uint8_t* base = area(b, i);
  size_t at = 0;
  for (int k = 0; k < n && at < len; ++k) {
    const size_t off = (size_t)((uint8_t*)(uintptr_t)sge[k].addr - base);
    const size_t part = len - at < sge[k].length ? len - at : sge[k].length;
    memcpy(want + off, data + at, part);
    at += part;
  }
  return first_diff(want, base, kArea);
}

static void t_send_sizes(struct bufs* b) {
  step("SEND into posted receives of several SGEs, data checked");
  struct qp_opts o = kDefaultOpts;
  o.max_recv_wr = 16;
  o.max_recv_sge = 4;
  struct pair p;
  if (!connect_pair(&p, &o, &o)) {
    free_pair(&p);
    return;
  }
  struct side* snd = &p.s[0];
  struct side* rcv = &p.s[1];
  enum { kN = 4 };
  static const uint32_t kSizes[kN] = {0, 1, 4096, 65537};
  /* Each receive: 3 SGEs of 5, 4000 and 70000 bytes with gaps between,
   * in area i of the remote buffer. */
  static const uint32_t kRecvLen[3] = {5, 4000, 70000};
  static const size_t kRecvOff[3] = {0, 100, 8000};
  memset(b->remote, 0xEE, (size_t)kN * kArea);
  struct ibv_sge rsge[kN][3];
  struct ibv_recv_wr rwr[kN];
  for (int i = 0; i < kN; ++i) {
    for (int k = 0; k < 3; ++k) {
      rsge[i][k] =
          sge_of(area(b, i) + kRecvOff[k], kRecvLen[k], b->rmr->lkey);
    }
    rwr[i] = recv_wr(2000 + (uint64_t)i, rsge[i], 3);
    rwr[i].next = i < kN - 1 ? &rwr[i + 1] : NULL;
  }
  struct ibv_recv_wr* rbad = NULL;
  int r = ibv_post_recv(rcv->qp, &rwr[0], &rbad);
  check(r == 0, "ibv_post_recv of a list of 4 receives of 3 SGEs each",
        "returned %d", r);

  /* The sources: SEND i from area i of the local buffer; the largest
   * gathers two SGEs, one from each local MR. */
  struct ibv_sge ssge[kN][2];
  struct ibv_send_wr swr[kN];
  uint8_t* sent[kN];
  uint8_t* joined = pages(kArea);
  for (int i = 0; i < kN; ++i) {
    sent[i] = b->local + (size_t)i * kArea;
    fill(sent[i], kSizes[i] + 1, 30 + (uint32_t)i);
    ssge[i][0] = sge_of(sent[i], kSizes[i], b->lmr->lkey);
    swr[i] = rdma_wr(IBV_WR_SEND, 2100 + (uint64_t)i, ssge[i],
                     kSizes[i] != 0 ? 1 : 0, 0, 0, IBV_SEND_SIGNALED);
    swr[i].next = i < kN - 1 ? &swr[i + 1] : NULL;
  }
  /* SEND 3: 65000 bytes from the first MR, 537 from the second. */
  fill(b->local2, 537, 34);
  ssge[3][0].length = 65000;
  ssge[3][1] = sge_of(b->local2, 537, b->lmr2->lkey);
  swr[3].num_sge = 2;
  memcpy(joined, sent[3], 65000);
  memcpy(joined + 65000, b->local2, 537);
  sent[3] = joined;

  struct ibv_send_wr* sbad = NULL;
  if (r == 0) r = ibv_post_send(snd->qp, &swr[0], &sbad);
  struct ibv_wc swc[kN], rwc[kN];
  memset(swc, 0, sizeof(swc));
  memset(rwc, 0, sizeof(rwc));
  const int sgot = r == 0 ? wait_wcs(snd->cq, swc, kN, 10000) : 0;
  const int rgot = r == 0 ? wait_wcs(rcv->cq, rwc, kN, 10000) : 0;
  check(r == 0 && sgot == kN && rgot == kN,
        "4 SENDs: 4 send and 4 receive completions",
        "post %d, %d send and %d receive completions", r, sgot, rgot);
  for (int i = 0; i < sgot; ++i) {
    char name[160];
    snprintf(name, sizeof(name),
             "SEND of %u bytes: the sender's completion is IBV_WC_SEND, "
             "success, in order",
             kSizes[i]);
    check(swc[i].wr_id == 2100 + (uint64_t)i &&
              swc[i].status == IBV_WC_SUCCESS && swc[i].opcode == IBV_WC_SEND,
          name, "wr_id %llu status %s opcode %d",
          (unsigned long long)swc[i].wr_id, wc_name(swc[i].status),
          swc[i].opcode);
  }
  for (int i = 0; i < rgot; ++i) {
    char name[160];
    snprintf(name, sizeof(name),
             "SEND of %u bytes: its receive completes with IBV_WC_RECV, "
             "byte_len %u, no immediate data, the receive's wr_id and QP",
             kSizes[i], kSizes[i]);
    check(rwc[i].wr_id == 2000 + (uint64_t)i &&
              rwc[i].status == IBV_WC_SUCCESS &&
              rwc[i].opcode == IBV_WC_RECV && rwc[i].byte_len == kSizes[i] &&
              (rwc[i].wc_flags & IBV_WC_WITH_IMM) == 0 &&
              rwc[i].qp_num == rcv->qp->qp_num,
          name, "wr_id %llu status %s opcode %d byte_len %u wc_flags %#x",
          (unsigned long long)rwc[i].wr_id, wc_name(rwc[i].status),
          rwc[i].opcode, rwc[i].byte_len, rwc[i].wc_flags);
    snprintf(name, sizeof(name),
             "SEND of %u bytes lands in order across the receive's SGEs, "
             "nothing else changes",
             kSizes[i]);
    const size_t d = scatter_diff(b, i, rsge[i], 3, sent[i], kSizes[i]);
    check(d == kArea, name, "area %d differs at offset %zu", i, d);
  }
  check(extra_wcs(snd->cq, 50) == 0 && extra_wcs(rcv->cq, 50) == 0,
        "4 SENDs: no further completion", "extra completions");
  free_pair(&p);
}

/* Checks a receive completion: wr_id, success, opcode, byte_len, and the
 * immediate data (IBV_WC_WITH_IMM and imm_data) when `with_imm`, or no
 * IBV_WC_WITH_IMM. */
static bool check_recv_wc(const struct ibv_wc* w, uint64_t wr_id,
                          enum ibv_wc_opcode opcode, bool with_imm,
                          uint32_t imm_data, uint32_t byte_len,
                          const char* name) {
  const bool imm_ok = with_imm ? (w->wc_flags & IBV_WC_WITH_IMM) &&
                                     w->imm_data == imm_data
                               : (w->wc_flags & IBV_WC_WITH_IMM) == 0;
  return check(w->wr_id == wr_id && w->status == IBV_WC_SUCCESS &&
                   w->opcode == opcode && imm_ok && w->byte_len == byte_len,
               name,
               "wr_id %llu status %s opcode %d wc_flags %#x imm_data %#x "
               "byte_len %u",
               (unsigned long long)w->wr_id, wc_name(w->status), w->opcode,
               w->wc_flags, ntohl(w->imm_data), w->byte_len);
}

static void t_immediate(struct bufs* b) {
  step("immediate data: SEND_WITH_IMM and RDMA_WRITE_WITH_IMM");
  struct qp_opts o = kDefaultOpts;
  o.max_recv_wr = 8;
  struct pair p;
  if (!connect_pair(&p, &o, &o)) {
    free_pair(&p);
    return;
  }
  struct side* snd = &p.s[0];
  struct side* rcv = &p.s[1];
  enum { kN = 4 };
  memset(b->remote, 0xEE, (size_t)(kN + 1) * kArea);
  int r = 0;
  for (int i = 0; i < kN && r == 0; ++i) {
    r = post_recv_area(rcv, b, i, 2200 + (uint64_t)i, 4096);
  }
  check(r == 0, "4 receives of 4096 bytes posted", "returned %d", r);
  /* SEND_WITH_IMM of 100 bytes; a WRITE_WITH_IMM of 5000 bytes into area
   * 4 (it takes the second receive, its buffer untouched); a
   * WRITE_WITH_IMM of no data; a plain SEND, which takes the fourth. */
  const uint32_t imm[3] = {htonl(0xA1B2C3D4u), htonl(0x01020304u),
                           htonl(0xFFFF0000u)};
  fill(b->local, 100, 40);
  fill(b->local + kArea, 5000, 41);
  fill(b->local + 2 * kArea, 10, 42);
  uint8_t* target = area(b, kN) + 3;
  struct ibv_sge sg[4] = {sge_of(b->local, 100, b->lmr->lkey),
                          sge_of(b->local + kArea, 5000, b->lmr->lkey),
                          sge_of(NULL, 0, 0),
                          sge_of(b->local + 2 * kArea, 10, b->lmr->lkey)};
  struct ibv_send_wr wr[4] = {
      rdma_wr(IBV_WR_SEND_WITH_IMM, 2300, &sg[0], 1, 0, 0, IBV_SEND_SIGNALED),
      rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 2301, &sg[1], 1,
              (uint64_t)(uintptr_t)target, b->rmr->rkey, IBV_SEND_SIGNALED),
      rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 2302, NULL, 0,
              (uint64_t)(uintptr_t)target, b->rmr->rkey, IBV_SEND_SIGNALED),
      rdma_wr(IBV_WR_SEND, 2303, &sg[3], 1, 0, 0, IBV_SEND_SIGNALED)};
  for (int i = 0; i < 3; ++i) {
    wr[i].imm_data = imm[i];
    wr[i].next = &wr[i + 1];
  }
  struct ibv_send_wr* bad = NULL;
  if (r == 0) r = ibv_post_send(snd->qp, &wr[0], &bad);
  struct ibv_wc swc[kN], rwc[kN];
  memset(swc, 0, sizeof(swc));
  memset(rwc, 0, sizeof(rwc));
  const int sgot = r == 0 ? wait_wcs(snd->cq, swc, kN, 10000) : 0;
  const int rgot = r == 0 ? wait_wcs(rcv->cq, rwc, kN, 10000) : 0;
  check(r == 0 && sgot == kN && rgot == kN,
        "SEND_WITH_IMM, 2 WRITE_WITH_IMM and a SEND: 4 completions at each end",
        "post %d, %d send and %d receive completions", r, sgot, rgot);
  if (sgot == kN) {
    bool ok = true;
    static const enum ibv_wc_opcode kOps[kN] = {IBV_WC_SEND, IBV_WC_RDMA_WRITE,
                                               IBV_WC_RDMA_WRITE, IBV_WC_SEND};
    for (int i = 0; i < kN; ++i) {
      if (swc[i].wr_id != 2300 + (uint64_t)i ||
          swc[i].status != IBV_WC_SUCCESS || swc[i].opcode != kOps[i]) {
        ok = false;
      }
    }
    check(ok,
          "the sender's completions: IBV_WC_SEND for the SENDs, "
          "IBV_WC_RDMA_WRITE for the WRITEs with immediate data, in order",
          "opcodes %d %d %d %d", swc[0].opcode, swc[1].opcode, swc[2].opcode,
          swc[3].opcode);
  }
  if (rgot >= 1) {
    check_recv_wc(&rwc[0], 2200, IBV_WC_RECV, true, imm[0], 100,
                  "SEND_WITH_IMM: IBV_WC_RECV with IBV_WC_WITH_IMM, its "
                  "imm_data and byte_len");
    check(first_diff(b->local, area(b, 0), 100) == 100 &&
              all_bytes(area(b, 0) + 100, 4096 - 100, 0xEE),
          "SEND_WITH_IMM: its data is in the receive", "first difference at %zu",
          first_diff(b->local, area(b, 0), 100));
  }
  if (rgot >= 2) {
    check_recv_wc(&rwc[1], 2201, IBV_WC_RECV_RDMA_WITH_IMM, true, imm[1], 5000,
                  "RDMA_WRITE_WITH_IMM takes a receive: "
                  "IBV_WC_RECV_RDMA_WITH_IMM with IBV_WC_WITH_IMM, its "
                  "imm_data, byte_len the WRITE's length");
    check(first_diff(b->local + kArea, target, 5000) == 5000 &&
              all_bytes(area(b, kN), 3, 0xEE) &&
              all_bytes(target + 5000, 100, 0xEE),
          "RDMA_WRITE_WITH_IMM: the data is at the remote address, and only "
          "there",
          "first difference at %zu", first_diff(b->local + kArea, target, 5000));
    check(all_bytes(area(b, 1), 4096, 0xEE),
          "RDMA_WRITE_WITH_IMM leaves the buffer of the receive it takes "
          "untouched",
          "the receive's buffer changed");
  }
  if (rgot >= 3) {
    check_recv_wc(&rwc[2], 2202, IBV_WC_RECV_RDMA_WITH_IMM, true, imm[2], 0,
                  "RDMA_WRITE_WITH_IMM without data (num_sge 0): "
                  "IBV_WC_RECV_RDMA_WITH_IMM, its imm_data, byte_len 0");
  }
  if (rgot >= 4) {
    check_recv_wc(&rwc[3], 2203, IBV_WC_RECV, false, 0, 10,
                  "a SEND after the WRITEs with immediate data takes the next "
                  "receive, without immediate data");
    check(first_diff(b->local + 2 * kArea, area(b, 3), 10) == 10,
          "that SEND's data is in its receive", "first difference at %zu",
          first_diff(b->local + 2 * kArea, area(b, 3), 10));
  }
  free_pair(&p);
}

static void t_inline_send(struct bufs* b) {
  step("inline SEND");
  struct qp_opts o0 = kDefaultOpts, o1 = kDefaultOpts;
  o0.max_inline_data = 64;
  o1.max_recv_wr = 4;
  struct pair p;
  if (!connect_pair(&p, &o0, &o1)) {
    free_pair(&p);
    return;
  }
  memset(area(b, 0), 0xEE, 256);
  int r = post_recv_area(&p.s[1], b, 0, 2400, 256);
  /* From the stack, unregistered, lkey 0; reusable once posted. */
  uint8_t stack[48];
  uint8_t want[48];
  fill(stack, sizeof(stack), 43);
  memcpy(want, stack, sizeof(want));
  struct ibv_sge sge = sge_of(stack, sizeof(stack), 0);
  struct ibv_send_wr w = rdma_wr(IBV_WR_SEND, 2401, &sge, 1, 0, 0,
                                 IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  struct ibv_send_wr* bad = NULL;
  if (r == 0) r = ibv_post_send(p.s[0].qp, &w, &bad);
  memset(stack, 0, sizeof(stack));
  struct ibv_wc swc, rwc;
  memset(&swc, 0, sizeof(swc));
  memset(&rwc, 0, sizeof(rwc));
  const int sgot = r == 0 ? wait_wcs(p.s[0].cq, &swc, 1, 10000) : 0;
  const int rgot = r == 0 ? wait_wcs(p.s[1].cq, &rwc, 1, 10000) : 0;
  check(sgot == 1 && swc.status == IBV_WC_SUCCESS && swc.wr_id == 2401 &&
            swc.opcode == IBV_WC_SEND && rgot == 1 &&
            rwc.status == IBV_WC_SUCCESS && rwc.wr_id == 2400 &&
            rwc.byte_len == sizeof(want) &&
            first_diff(want, area(b, 0), sizeof(want)) == sizeof(want) &&
            all_bytes(area(b, 0) + sizeof(want), 256 - sizeof(want), 0xEE),
        "inline SEND of 48 bytes from an unregistered stack buffer, lkey 0, "
        "arrives whole",
        "post %d; sender: %d completions, status %s; receiver: %d "
        "completions, status %s, byte_len %u",
        r, sgot, sgot ? wc_name(swc.status) : "none", rgot,
        rgot ? wc_name(rwc.status) : "none", rwc.byte_len);
  free_pair(&p);
}

static void t_rnr(struct bufs* b) {
  step("RNR: a SEND that finds no receive");
  /* rnr_retry 1 at the sender, the receiver's RNR timer 0.01 ms (code 1):
   * the retry runs out at once. */
  struct qp_opts o0 = kDefaultOpts, o1 = kDefaultOpts;
  o0.rnr_retry = 1;
  o1.min_rnr_timer = 1;
  o1.max_recv_wr = 4;
  struct pair p;
  if (connect_pair(&p, &o0, &o1)) {
    fill(b->local, 64, 44);
    const double start = now_s();
    const int r = post_send1(&p.s[0], b, IBV_WR_SEND, 2500, 0, 64, 0, 0);
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    const int got = r == 0 ? wait_wcs(p.s[0].cq, &wc, 1, 10000) : 0;
    check(got == 1 && wc.wr_id == 2500 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
          "a SEND without a receive, rnr_retry 1: IBV_WC_RNR_RETRY_EXC_ERR at "
          "the sender",
          "post %d, %d completions, status %s after %.2f s", r, got,
          got ? wc_name(wc.status) : "none", now_s() - start);
    if (got == 1) check_after_error(&p.s[0], b, "RNR retries exhausted");
    check(extra_wcs(p.s[1].cq, 50) == 0,
          "the receiver without a receive completes nothing",
          "extra completions");
  }
  free_pair(&p);

  /* rnr_retry 7 retries for ever: a receive posted 20 ms later takes the
   * SEND. */
  o0 = kDefaultOpts;
  o0.rnr_retry = 7;
  o1 = kDefaultOpts;
  o1.max_recv_wr = 4;
  if (connect_pair(&p, &o0, &o1)) {
    fill(b->local, 4096, 45);
    memset(area(b, 0), 0xEE, 8192);
    int r = post_send1(&p.s[0], b, IBV_WR_SEND, 2510, 0, 4096, 0, 0);
    struct ibv_wc swc, rwc;
    memset(&swc, 0, sizeof(swc));
    memset(&rwc, 0, sizeof(rwc));
    const int early = r == 0 ? wait_wcs(p.s[0].cq, &swc, 1, 20) : 0;
    check(r == 0 && early == 0,
          "rnr_retry 7: the SEND does not complete while no receive is posted",
          "post %d, %d completions, status %s", r, early,
          early ? wc_name(swc.status) : "none");
    if (r == 0 && early == 0) {
      r = post_recv_area(&p.s[1], b, 0, 2511, 8192);
      const int sgot = r == 0 ? wait_wcs(p.s[0].cq, &swc, 1, 10000) : 0;
      const int rgot = r == 0 ? wait_wcs(p.s[1].cq, &rwc, 1, 10000) : 0;
      check(sgot == 1 && swc.wr_id == 2510 && swc.status == IBV_WC_SUCCESS &&
                rgot == 1 && rwc.wr_id == 2511 &&
                rwc.status == IBV_WC_SUCCESS && rwc.byte_len == 4096 &&
                first_diff(b->local, area(b, 0), 4096) == 4096,
            "rnr_retry 7: a receive posted 20 ms later takes the SEND; both "
            "ends succeed, the data in place",
            "post_recv %d; sender: %d completions, status %s; receiver: %d "
            "completions, status %s, byte_len %u",
            r, sgot, sgot ? wc_name(swc.status) : "none", rgot,
            rgot ? wc_name(rwc.status) : "none", rwc.byte_len);
    }
  }
  free_pair(&p);
}

static void t_recv_too_small(struct bufs* b) {
  step("a SEND larger than its receive");
  struct qp_opts o = kDefaultOpts;
  o.max_recv_wr = 4;
  struct pair p;
  if (connect_pair(&p, &o, &o)) {
    fill(b->local, 200, 46);
    int r = post_recv_area(&p.s[1], b, 0, 2600, 100);
    if (r == 0) r = post_send1(&p.s[0], b, IBV_WR_SEND, 2601, 0, 200, 0, 0);
    struct ibv_wc swc, rwc;
    memset(&swc, 0, sizeof(swc));
    memset(&rwc, 0, sizeof(rwc));
    const int rgot = r == 0 ? wait_wcs(p.s[1].cq, &rwc, 1, 10000) : 0;
    const int sgot = r == 0 ? wait_wcs(p.s[0].cq, &swc, 1, 10000) : 0;
    check(rgot == 1 && rwc.wr_id == 2600 && rwc.status == IBV_WC_LOC_LEN_ERR,
          "a 200-byte SEND into a 100-byte receive: IBV_WC_LOC_LEN_ERR at the "
          "receiver",
          "post %d, %d completions, status %s", r, rgot,
          rgot ? wc_name(rwc.status) : "none");
    check(sgot == 1 && swc.wr_id == 2601 &&
              swc.status == IBV_WC_REM_INV_REQ_ERR,
          "a 200-byte SEND into a 100-byte receive: IBV_WC_REM_INV_REQ_ERR at "
          "the sender",
          "post %d, %d completions, status %s", r, sgot,
          sgot ? wc_name(swc.status) : "none");
    check_state(p.s[1].qp, IBV_QPS_ERR,
                "the receiver's QP is in ERR after IBV_WC_LOC_LEN_ERR");
    check_state(p.s[0].qp, IBV_QPS_ERR,
                "the sender's QP is in ERR after IBV_WC_REM_INV_REQ_ERR");
  }
  free_pair(&p);
}

/* ibv_resize_cq(3): a CQ takes a new size from 1 to max_cqe, but never
 * one below the completions it holds at the moment (EINVAL, the CQ as it
 * was). The receiver's CQ here holds only its receives' completions. */
static void t_resize_cq(struct bufs* b) {
  step("ibv_resize_cq");
  struct qp_opts o1 = kDefaultOpts;
  o1.cqe = 4;
  o1.max_recv_wr = 4;
  struct pair p;
  if (!connect_pair(&p, &kDefaultOpts, &o1)) {
    free_pair(&p);
    return;
  }
  struct ibv_cq* cq = p.s[1].cq;
  int r1 = ibv_resize_cq(cq, 1);
  const int c1 = cq->cqe;
  int r16 = ibv_resize_cq(cq, 16);
  check(r1 == 0 && c1 >= 1 && r16 == 0 && cq->cqe >= 16,
        "an empty CQ shrinks to 1 entry and grows to 16",
        "returned %d (cqe %d), %d (cqe %d)", r1, c1, r16, cq->cqe);
  check(ibv_resize_cq(cq, 0) == EINVAL && ibv_resize_cq(cq, -1) == EINVAL &&
            ibv_resize_cq(cq, 65536) == EINVAL && cq->cqe >= 16,
        "0, -1 and max_cqe + 1 entries are EINVAL", "accepted");
  bool ok = true;
  for (int i = 0; i < 3; ++i) {
    ok = ok && post_recv_area(&p.s[1], b, i, 2900 + (uint64_t)i, 64) == 0;
  }
  for (int i = 0; i < 3; ++i) {
    ok = ok && post_send1(&p.s[0], b, IBV_WR_SEND, 2910 + (uint64_t)i, 0, 64,
                          0, 0) == 0;
  }
  struct ibv_wc wc[3];
  ok = ok && wait_wcs(p.s[0].cq, wc, 3, 10000) == 3;
  /* The three receives' completions reach the receiver's CQ: until then a
   * size of 2 is still taken. */
  int r2 = 0, before = 0;
  const double until = now_s() + 10;
  do {
    before = cq->cqe;
    r2 = ibv_resize_cq(cq, 2);
  } while (ok && r2 == 0 && now_s() < until && sched_yield() == 0);
  check(ok && r2 == EINVAL && cq->cqe == before,
        "with 3 completions in it, resizing to 2 is EINVAL and leaves it",
        "returned %d, cqe %d (was %d)", r2, cq->cqe, before);
  check(ibv_resize_cq(cq, 3) == 0 && cq->cqe == 3,
        "with 3 completions in it, resizing to 3 works", "cqe %d", cq->cqe);
  check(wait_wcs(cq, wc, 3, 10000) == 3 && ibv_resize_cq(cq, 1) == 0 &&
            cq->cqe == 1,
        "once they are polled, it shrinks to 1", "cqe %d", cq->cqe);
  /* A send not yet ended counts as held, ended or not when the call comes:
   * two SENDs waiting for receives (RNR, retried for ever) keep the
   * sender's CQ at 2 entries or more. */
  struct ibv_cq* scq = p.s[0].cq;
  ok = ibv_resize_cq(scq, 1) == 0;
  for (int i = 0; i < 2; ++i) {
    ok = ok && post_send1(&p.s[0], b, IBV_WR_SEND, 2920 + (uint64_t)i, 0, 64,
                          0, 0) == 0;
  }
  check(ok && ibv_resize_cq(scq, 1) == EINVAL && ibv_resize_cq(scq, 2) == 0,
        "sends outstanding count as held: 1 is EINVAL, 2 works",
        "cqe %d", scq->cqe);
  for (int i = 0; i < 2; ++i) {
    post_recv_area(&p.s[1], b, i, 2930 + (uint64_t)i, 64);
  }
  check(wait_wcs(scq, wc, 2, 10000) == 2 && wait_wcs(cq, wc, 2, 10000) == 2,
        "the sends complete once receives come", "they did not");
  free_pair(&p);
}

/* ibv_post_recv by queue pair state, its limits, and receives flushed. */
static void t_recv_queue(struct bufs* b) {
  step("ibv_post_recv: states, limits, flush");
  struct qp_opts o0 = kDefaultOpts, o1 = kDefaultOpts;
  o1.max_recv_wr = 4;
  o1.max_recv_sge = 2;
  struct pair p;
  memset(&p, 0, sizeof(p));
  if (!make_side(&p.s[0], &g_dev[0], &o0) ||
      !make_side(&p.s[1], &g_dev[1], &o1)) {
    free_pair(&p);
    return;
  }
  struct side* rcv = &p.s[1];
  const int n = (int)rcv->cap.max_recv_wr;
  if (!check(n >= 4 && n <= 64 && rcv->cap.max_recv_sge >= 2,
             "ibv_create_qp grants max_recv_wr and max_recv_sge asked for",
             "max_recv_wr %d max_recv_sge %u", n, rcv->cap.max_recv_sge)) {
    free_pair(&p);
    return;
  }
  memset(b->remote, 0xEE, 8 * (size_t)kArea);
  struct ibv_sge sge = sge_of(area(b, 0), 4096, b->rmr->lkey);
  struct ibv_recv_wr w = recv_wr(2700, &sge, 1);
  struct ibv_recv_wr* bad = NULL;
  int r = ibv_post_recv(rcv->qp, &w, &bad);
  check(r == EINVAL && bad == &w,
        "ibv_post_recv in RESET fails with EINVAL, bad_wr set",
        "returned %d, bad_wr %s", r, bad == &w ? "is the WR" : "is not the WR");

  if (!pair_to_init(&p)) {
    free_pair(&p);
    return;
  }
  /* Posted in INIT, taken by the first SEND once connected. */
  r = post_recv1(rcv, 2701, &sge, 1);
  check(r == 0, "ibv_post_recv in INIT", "returned %d", r);

  struct ibv_sge many[9];
  for (int i = 0; i < 9; ++i) {
    many[i] = sge_of(area(b, 1) + i * 64, 64, b->rmr->lkey);
  }
  w = recv_wr(2702, many, (int)rcv->cap.max_recv_sge + 1);
  bad = NULL;
  r = ibv_post_recv(rcv->qp, &w, &bad);
  check(r == EINVAL && bad == &w,
        "a receive with max_recv_sge + 1 SGEs fails with EINVAL, bad_wr set",
        "returned %d, bad_wr %s", r, bad == &w ? "is the WR" : "is not the WR");

  /* One is posted: a list of max_recv_wr more, the last one too many. */
  struct ibv_recv_wr* list = calloc((size_t)n, sizeof(*list));
  struct ibv_sge* lsge = calloc((size_t)n, sizeof(*lsge));
  for (int i = 0; i < n; ++i) {
    lsge[i] = sge_of(area(b, 2) + (size_t)i * 4096, 4096, b->rmr->lkey);
    list[i] = recv_wr(2710 + (uint64_t)i, &lsge[i], 1);
    list[i].next = i < n - 1 ? &list[i + 1] : NULL;
  }
  bad = NULL;
  r = ibv_post_recv(rcv->qp, &list[0], &bad);
  check(r == ENOMEM && bad == &list[n - 1],
        "max_recv_wr + 1 outstanding receives: the last is refused with "
        "ENOMEM, bad_wr names it",
        "max_recv_wr %d: returned %d, bad_wr is WR %d", n, r,
        bad == NULL ? -1 : (int)(bad - list));

  if (pair_to_rts(&p, &o0, &o1)) {
    fill(b->local, 3000, 47);
    r = post_send1(&p.s[0], b, IBV_WR_SEND, 2703, 0, 3000, 0, 0);
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    const int got = r == 0 ? wait_wcs(rcv->cq, &wc, 1, 10000) : 0;
    check(got == 1 && wc.wr_id == 2701 && wc.status == IBV_WC_SUCCESS &&
              wc.byte_len == 3000 &&
              first_diff(b->local, area(b, 0), 3000) == 3000,
          "the receive posted in INIT takes the first SEND",
          "post %d, %d completions, wr_id %llu status %s byte_len %u", r, got,
          (unsigned long long)wc.wr_id, got ? wc_name(wc.status) : "none",
          wc.byte_len);
    struct ibv_wc swc;
    if (wait_wcs(p.s[0].cq, &swc, 1, 10000) != 1) {
      check(false, "the SEND into the receive posted in INIT completes",
            "no completion at the sender");
    }

    /* The max_recv_wr - 1 still posted are flushed by the move to ERR, in
     * order; then one posted in ERR completes flushed too. */
    r = to_state(rcv->qp, IBV_QPS_ERR);
    struct ibv_wc fl[64];
    memset(fl, 0, sizeof(fl));
    const int want = n - 1;
    int fgot = r == 0 ? wait_wcs(rcv->cq, fl, want, 10000) : 0;
    bool ok = fgot == want;
    for (int i = 0; i < fgot; ++i) {
      if (fl[i].wr_id != 2710 + (uint64_t)i ||
          fl[i].status != IBV_WC_WR_FLUSH_ERR ||
          fl[i].qp_num != rcv->qp->qp_num) {
        ok = false;
      }
    }
    check(r == 0 && ok,
          "modify to ERR: every posted receive completes with "
          "IBV_WC_WR_FLUSH_ERR, in order",
          "modify %d, %d of %d completions, first status %s", r, fgot, want,
          fgot ? wc_name(fl[0].status) : "none");
    check(extra_wcs(rcv->cq, 50) == 0,
          "the receive refused with ENOMEM never completes",
          "extra completions");
    /* docs/verbs.md: in ERR a receive completes at once, flushed. */
    r = post_recv1(rcv, 2720, &sge, 1);
    fgot = r == 0 ? wait_wcs(rcv->cq, fl, 1, 5000) : 0;
    check(r == 0 && fgot == 1 && fl[0].wr_id == 2720 &&
              fl[0].status == IBV_WC_WR_FLUSH_ERR,
          "a receive posted in ERR completes with IBV_WC_WR_FLUSH_ERR",
          "post %d, %d completions, status %s", r, fgot,
          fgot ? wc_name(fl[0].status) : "none");
    check(extra_wcs(rcv->cq, 50) == 0, "nothing else completes in ERR",
          "extra completions");
  }
  free(list);
  free(lsge);
  free_pair(&p);

  /* The largest receive queue and SGE count served (max_qp_wr, max_sge),
   * and one more. */
  struct ibv_device_attr da;
  if (ibv_query_device(g_dev[1].ctx, &da) != 0) {
    check(false, "ibv_query_device", "errno %d", errno);
    return;
  }
  struct ibv_cq* cq = ibv_create_cq(g_dev[1].ctx, 16, NULL, NULL, 0);
  if (cq == NULL) return;
  const uint32_t max_wr = (uint32_t)da.max_qp_wr;
  const uint32_t max_sge = (uint32_t)da.max_sge;
  const struct {
    uint32_t wr, sge;
    bool ok;
    const char* name;
  } kCaps[] = {
      {max_wr, max_sge, true,
       "ibv_create_qp with max_recv_wr max_qp_wr and max_recv_sge max_sge"},
      {max_wr + 1, 1, false,
       "ibv_create_qp with max_recv_wr max_qp_wr + 1 fails with EINVAL"},
      {1, max_sge + 1, false,
       "ibv_create_qp with max_recv_sge max_sge + 1 fails with EINVAL"},
  };
  for (size_t i = 0; i < sizeof(kCaps) / sizeof(kCaps[0]); ++i) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_wr = kCaps[i].wr;
    init.cap.max_recv_sge = kCaps[i].sge;
    errno = 0;
    struct ibv_qp* qp = ibv_create_qp(g_dev[1].pd, &init);
    if (kCaps[i].ok) {
      check(qp != NULL && init.cap.max_recv_wr >= kCaps[i].wr &&
                init.cap.max_recv_sge >= kCaps[i].sge,
            kCaps[i].name, "qp %p errno %d, max_recv_wr %u max_recv_sge %u",
            (void*)qp, errno, init.cap.max_recv_wr, init.cap.max_recv_sge);
    } else {
      check(qp == NULL && errno == EINVAL, kCaps[i].name, "qp %p errno %d",
            (void*)qp, errno);
    }
    if (qp != NULL) ibv_destroy_qp(qp);
  }
  ibv_destroy_cq(cq);
}

/* Takes every event waiting on a non-blocking channel, acknowledged;
 * returns how many there were. */
static int drain_events(struct ibv_comp_channel* ch) {
  int n = 0;
  struct ibv_cq* cq = NULL;
  void* ctx = NULL;
  while (ibv_get_cq_event(ch, &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    ++n;
  }
  return n;
}

/* Whether the channel's fd becomes readable within ms (poll(2)). */
static bool readable_within(struct ibv_comp_channel* ch, int ms) {
  struct pollfd pfd = {ch->fd, POLLIN, 0};
  return poll(&pfd, 1, ms) == 1 && (pfd.revents & POLLIN) != 0;
}

/* A SEND of 64 bytes from s[0] into a receive posted for it at s[1];
 * waits for the sender's completion (so the receive has completed too,
 * in the CQ). Returns whether both posts and the send succeeded. */
static bool send_into_receive(struct pair* p, struct bufs* b, uint64_t wr_id,
                              unsigned flags) {
  int r = post_recv_area(&p->s[1], b, 0, wr_id, 4096);
  if (r == 0) r = post_send1(&p->s[0], b, IBV_WR_SEND, wr_id, 0, 64, flags, 0);
  struct ibv_wc wc;
  const int got = r == 0 ? wait_wcs(p->s[0].cq, &wc, 1, 10000) : 0;
  const bool ok = got == 1 && wc.status == IBV_WC_SUCCESS;
  if (!ok) {
    check(false, "a SEND into a posted receive, for the events",
          "post %d, %d completions, status %s", r, got,
          got ? wc_name(wc.status) : "none");
  }
  return ok;
}

/* The receive of send_into_receive, polled from s[1]'s CQ. */
static bool receive_polled(struct pair* p, uint64_t wr_id) {
  struct ibv_wc wc;
  const int got = wait_wcs(p->s[1].cq, &wc, 1, 10000);
  return got == 1 && wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS;
}

static void t_recv_events(struct bufs* b) {
  step("completion events of receives");
  struct qp_opts o1 = kDefaultOpts;
  o1.channel = true;
  o1.max_recv_wr = 8;
  struct pair p;
  if (!connect_pair(&p, &kDefaultOpts, &o1)) {
    free_pair(&p);
    return;
  }
  struct side* rcv = &p.s[1];
  struct ibv_comp_channel* ch = rcv->channel;
  const int fl = fcntl(ch->fd, F_GETFL);
  int r = fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
  check(fl >= 0 && r == 0, "O_NONBLOCK on the completion channel's fd",
        "fcntl failed: errno %d", errno);

  /* ibv_get_cq_event(3)'s non-blocking use: nothing armed, no event. */
  struct ibv_cq* ev_cq = NULL;
  void* ev_ctx = NULL;
  errno = 0;
  r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
  check(r == -1 && errno == EAGAIN,
        "O_NONBLOCK, nothing armed: ibv_get_cq_event returns -1 with EAGAIN",
        "returned %d, errno %d", r, errno);

  /* Armed, a receive completes: the fd polls readable, one event. */
  r = ibv_req_notify_cq(rcv->cq, 0);
  bool sent = r == 0 && send_into_receive(&p, b, 2800, 0);
  bool ev = sent && readable_within(ch, 2000);
  check(ev, "an armed CQ: a receive's completion makes the channel's fd "
            "readable (poll)",
        "notify %d, fd not readable within 2 s", r);
  if (ev) {
    ev_cq = NULL;
    ev_ctx = NULL;
    r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
    check(r == 0 && ev_cq == rcv->cq && ev_ctx == rcv,
          "ibv_get_cq_event returns the receive CQ and its context",
          "returned %d", r);
    if (r == 0) ibv_ack_cq_events(ev_cq, 1);
    errno = 0;
    r = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
    check(r == -1 && errno == EAGAIN,
          "one event per ibv_req_notify_cq: the next ibv_get_cq_event returns "
          "-1 with EAGAIN",
          "returned %d, errno %d", r, errno);
    if (r == 0) ibv_ack_cq_events(ev_cq, 1);
  }
  check(sent && receive_polled(&p, 2800), "the receive that raised the event "
                                          "is polled",
        "no successful receive completion");

  /* ibv_req_notify_cq(3): an event comes "upon the addition of a new CQ
   * entry". A receive already in the CQ when it is armed is none. */
  sent = send_into_receive(&p, b, 2801, 0);
  sleep_us(50000);
  r = ibv_req_notify_cq(rcv->cq, 0);
  ev = readable_within(ch, 200);
  check(sent && r == 0 && !ev,
        "a completion already in the CQ when it is armed raises no event",
        "notify %d, an event within 200 ms", r);
  drain_events(ch);
  check(sent && receive_polled(&p, 2801), "the receive in the CQ is polled",
        "no successful receive completion");
  /* Armed (again, should an event have gone), the CQ empty: the next
   * receive raises the event. */
  r = ibv_req_notify_cq(rcv->cq, 0);
  sent = r == 0 && send_into_receive(&p, b, 2802, 0);
  ev = sent && readable_within(ch, 2000);
  check(ev, "a receive completing after the CQ was armed raises the event",
        "notify %d, fd not readable within 2 s", r);
  drain_events(ch);
  check(sent && receive_polled(&p, 2802), "that receive is polled",
        "no successful receive completion");

  /* solicited_only: a SEND without IBV_SEND_SOLICITED raises no event, one
   * with it does. */
  r = ibv_req_notify_cq(rcv->cq, 1);
  sent = r == 0 && send_into_receive(&p, b, 2803, 0);
  ev = readable_within(ch, 200);
  check(sent && !ev,
        "solicited_only: a receive of a SEND without IBV_SEND_SOLICITED raises "
        "no event",
        "notify %d, an event within 200 ms", r);
  drain_events(ch);
  check(sent && receive_polled(&p, 2803), "the unsolicited receive is polled",
        "no successful receive completion");
  if (!ev) {
    sent = send_into_receive(&p, b, 2804, IBV_SEND_SOLICITED);
    ev = sent && readable_within(ch, 2000);
    check(ev,
          "solicited_only: a receive of a SEND with IBV_SEND_SOLICITED raises "
          "the event",
          "fd not readable within 2 s");
    ev_cq = NULL;
    r = ev ? ibv_get_cq_event(ch, &ev_cq, &ev_ctx) : -1;
    check(r == 0 && ev_cq == rcv->cq,
          "the solicited event names the receive CQ", "returned %d", r);
    if (r == 0) ibv_ack_cq_events(ev_cq, 1);
    drain_events(ch);
    check(sent && receive_polled(&p, 2804), "the solicited receive is polled",
          "no successful receive completion");
  }
  free_pair(&p);
}

/* --- Main -------------------------------------------------------------- */

/* The first device of RDMAPLANE_SOCKET, opened; NULL (a failed check)
 * when there is none. */
static struct ibv_context* open_first_device(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!check(list != NULL && n >= 1, "a device to open", "%d devices", n)) {
    if (list != NULL) ibv_free_device_list(list);
    return NULL;
  }
  struct ibv_context* c = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  check(c != NULL, "ibv_open_device", "errno %d", errno);
  return c;
}

/* conformance --device-fatal: opens the first device, says "ready", and
 * waits in ibv_get_async_event until IBV_EVENT_DEVICE_FATAL, which must
 * come when the daemon goes (conformance_test.sh stops it). */
static int device_fatal_mode(void) {
  step("IBV_EVENT_DEVICE_FATAL when the daemon goes");
  struct ibv_context* c = open_first_device();
  if (c == NULL) return 1;
  printf("ready\n");
  fflush(stdout);
  alarm(30);
  struct ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  const int r = ibv_get_async_event(c, &ev);
  check(r == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL,
        "the daemon gone raises IBV_EVENT_DEVICE_FATAL", "returned %d, %s", r,
        ibv_event_type_str(ev.event_type));
  if (r == 0) ibv_ack_async_event(&ev);
  check(!async_ready(c, 100), "it is raised once", "another event came");
  ibv_close_device(c);
  alarm(0);
  return g_failed == 0 ? 0 : 1;
}

/* Waits for the next asynchronous event of c (alarm() bounds the wait):
 * it must be `want`, naming port 1; then ibv_query_port must say `state`. */
static void expect_port_event(struct ibv_context* c, enum ibv_event_type want,
                              enum ibv_port_state state, const char* name) {
  struct ibv_async_event ev;
  memset(&ev, 0, sizeof(ev));
  const int r = ibv_get_async_event(c, &ev);
  check(r == 0 && ev.event_type == want && ev.element.port_num == 1, name,
        "returned %d, %s, port %d", r, ibv_event_type_str(ev.event_type),
        ev.element.port_num);
  if (r == 0) ibv_ack_async_event(&ev);
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  const int q = ibv_query_port(c, 1, &pa);
  check(q == 0 && pa.state == state, "ibv_query_port agrees with the event",
        "returned %d, state %s", q, ibv_port_state_str(pa.state));
}

/* conformance --port-events: the first device's daemon loses its data
 * port's peer and gets it back (conformance_test.sh stops daemon B, then
 * starts it again): IBV_EVENT_PORT_ERR, then IBV_EVENT_PORT_ACTIVE, each
 * naming port 1, and nothing else; ibv_query_port agrees after each.
 * Prints "ready" once the device is open, "down" after the first event. */
static int port_events_mode(void) {
  step("IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE as the link goes");
  struct ibv_context* c = open_first_device();
  if (c == NULL) return 1;
  printf("ready\n");
  alarm(60);
  expect_port_event(c, IBV_EVENT_PORT_ERR, IBV_PORT_DOWN,
                    "the peer gone raises IBV_EVENT_PORT_ERR on port 1");
  printf("down\n");
  expect_port_event(c, IBV_EVENT_PORT_ACTIVE, IBV_PORT_ACTIVE,
                    "the peer back raises IBV_EVENT_PORT_ACTIVE on port 1");
  check(!async_ready(c, 300), "no other event comes", "another event came");
  alarm(0);
  ibv_close_device(c);
  return g_failed == 0 ? 0 : 1;
}

/* conformance --port-down: the first device's daemon has lost its data
 * port's peer (conformance_test.sh stopped it): port 1 goes DOWN, as the
 * link is, within 10 s. */
static int port_down_mode(void) {
  step("ibv_query_port reports the link as it is");
  struct ibv_context* c = open_first_device();
  if (c == NULL) return 1;
  struct ibv_port_attr pa;
  int r = 0;
  const double until = now_s() + 10;
  do {
    memset(&pa, 0, sizeof(pa));
    r = ibv_query_port(c, 1, &pa);
    if (r != 0 || pa.state != IBV_PORT_ACTIVE) break;
    sleep_us(10000);
  } while (now_s() < until);
  check(r == 0 && pa.state == IBV_PORT_DOWN && pa.phys_state == 2,
        "with the data port's peer gone, port 1 is DOWN (physical state "
        "Polling)",
        "returned %d, state %d, phys_state %u", r, pa.state, pa.phys_state);
  ibv_close_device(c);
  return g_failed == 0 ? 0 : 1;
}

/* IBV_EVENT_COMM_EST: a connected queue pair still in RTR that receives a
 * message raises it, once; in RTS nothing more (IBA 11.6.3.1). */
static void t_comm_est(struct bufs* b) {
  step("IBV_EVENT_COMM_EST");
  struct qp_opts o = kDefaultOpts;
  o.max_recv_wr = 4;
  struct pair p;
  memset(&p, 0, sizeof(p));
  if (!make_side(&p.s[0], &g_dev[0], &o) ||
      !make_side(&p.s[1], &g_dev[1], &o) || !pair_to_init(&p)) {
    free_pair(&p);
    return;
  }
  struct ibv_context* c1 = g_dev[1].ctx;
  const uint32_t psn = 0x4242;
  struct ibv_qp_attr a;
  rtr_attr(&a, &g_dev[0].gid, p.s[0].qp->qp_num, psn);
  int r = ibv_modify_qp(p.s[1].qp, &a, kRtrMask);
  rtr_attr(&a, &g_dev[1].gid, p.s[1].qp->qp_num, 0x77);
  r |= ibv_modify_qp(p.s[0].qp, &a, kRtrMask);
  r |= to_rts(p.s[0].qp, psn);
  r |= post_recv_area(&p.s[1], b, 0, 700, 4096);
  r |= post_recv_area(&p.s[1], b, 1, 701, 4096);
  if (!check(r == 0, "the sender in RTS, the receiver in RTR with receives",
             "failed")) {
    free_pair(&p);
    return;
  }
  check(!async_ready(c1, 0), "no event before anything arrives",
        "an event is pending");
  r = post_send1(&p.s[0], b, IBV_WR_SEND, 702, 0, 64, 0, 0);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  int n = r == 0 ? wait_wcs(p.s[1].cq, &wc, 1, 10000) : 0;
  check(n == 1 && wc.wr_id == 700 && wc.status == IBV_WC_SUCCESS,
        "a SEND lands at the receiver in RTR", "post %d; %d: %s", r, n,
        wc_name(wc.status));
  check(take_async(c1, IBV_EVENT_COMM_EST, p.s[1].qp),
        "the receiver in RTR raises IBV_EVENT_COMM_EST for its queue pair",
        "no such event");
  r = to_rts(p.s[1].qp, 0x77);
  check(r == 0, "the receiver goes to RTS", "returned %d", r);
  r = post_send1(&p.s[0], b, IBV_WR_SEND, 703, 0, 64, 0, 0);
  memset(&wc, 0, sizeof(wc));
  n = r == 0 ? wait_wcs(p.s[1].cq, &wc, 1, 10000) : 0;
  check(n == 1 && wc.wr_id == 701 && !async_ready(c1, 0),
        "a message received in RTS raises no second event",
        "%d completions; event pending %d", n, async_ready(c1, 0));
  (void)drain_cq(p.s[0].cq);
  free_pair(&p);

  /* The first packet is an RDMA WRITE, which completes nothing at the
   * receiver, and the receiver never polls its CQ: the event comes all
   * the same (IBA 11.6.3.1: the first packet received in RTR). */
  memset(&p, 0, sizeof(p));
  if (!make_side(&p.s[0], &g_dev[0], &o) ||
      !make_side(&p.s[1], &g_dev[1], &o) || !pair_to_init(&p)) {
    free_pair(&p);
    return;
  }
  rtr_attr(&a, &g_dev[0].gid, p.s[0].qp->qp_num, psn);
  r = ibv_modify_qp(p.s[1].qp, &a, kRtrMask);
  rtr_attr(&a, &g_dev[1].gid, p.s[1].qp->qp_num, 0x77);
  r |= ibv_modify_qp(p.s[0].qp, &a, kRtrMask);
  r |= to_rts(p.s[0].qp, psn);
  struct ibv_sge sge = sge_of(b->local, 64, b->lmr->lkey);
  r = r == 0 ? rdma_once(&p.s[0], IBV_WR_RDMA_WRITE, 704, &sge, 1, raddr(b, 0),
                         b->rmr->rkey, "a WRITE to a queue pair in RTR", NULL)
             : -1;
  check(r == IBV_WC_SUCCESS, "a WRITE to a queue pair in RTR completes",
        "status %s", wc_name(r));
  check(take_async(c1, IBV_EVENT_COMM_EST, p.s[1].qp),
        "its first packet, a WRITE, raises IBV_EVENT_COMM_EST at the receiver "
        "in RTR, which never polled its CQ",
        "no such event");
  free_pair(&p);
}

/* UC (ibv_modify_qp(3)'s UC column, ibv_post_send(3)): the moves take
 * only UC's attributes; SENDs and WRITEs (with immediate data too) land,
 * READs and atomics are refused at the post with EINVAL. */
static void t_uc(struct bufs* b) {
  step("UC queue pairs");
  struct qp_opts o = kDefaultOpts;
  o.qp_type = IBV_QPT_UC;
  o.max_recv_wr = 8;
  struct pair p;
  memset(&p, 0, sizeof(p));
  if (!make_side(&p.s[0], &g_dev[0], &o) || !make_side(&p.s[1], &g_dev[1], &o)) {
    free_pair(&p);
    return;
  }
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  int r = ibv_query_qp(p.s[0].qp, &qa, IBV_QP_STATE, &qi);
  check(r == 0 && qi.qp_type == IBV_QPT_UC && p.s[0].qp->qp_type == IBV_QPT_UC,
        "a UC queue pair is created and reports its type", "r %d type %d", r,
        qi.qp_type);
  if (!pair_to_init(&p)) {
    free_pair(&p);
    return;
  }
  enum {
    kUcRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                 IBV_QP_RQ_PSN,
    kUcRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN,
  };
  const uint32_t psn[2] = {g_psn, g_psn + 0x100};
  g_psn += 0x10000;
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr a;
    rtr_attr(&a, &g_dev[1 - i].gid, p.s[1 - i].qp->qp_num, psn[1 - i]);
    r = ibv_modify_qp(p.s[i].qp, &a, kRtrMask);
    check(r == EINVAL, "UC INIT->RTR refuses RC's READ and RNR attributes",
          "side %d: %d", i, r);
    r = ibv_modify_qp(p.s[i].qp, &a, kUcRtrMask);
    check(r == 0, "UC INIT->RTR with AV, path MTU, dest QPN and RQ PSN",
          "side %d: %d", i, r);
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr a;
    rts_attr(&a, psn[i]);
    r = ibv_modify_qp(p.s[i].qp, &a, kRtsMask);
    check(r == EINVAL, "UC RTR->RTS refuses RC's timeout and retry counts",
          "side %d: %d", i, r);
    r = ibv_modify_qp(p.s[i].qp, &a, kUcRtsMask);
    check(r == 0, "UC RTR->RTS with the SQ PSN", "side %d: %d", i, r);
  }
  if (qp_state(p.s[0].qp) != IBV_QPS_RTS || qp_state(p.s[1].qp) != IBV_QPS_RTS) {
    check(false, "UC queue pairs reach RTS", "states %d %d",
          qp_state(p.s[0].qp), qp_state(p.s[1].qp));
    free_pair(&p);
    return;
  }

  /* READ and the atomics are not UC operations. */
  uint8_t* src = b->local;
  struct ibv_sge sge = sge_of(src, 8, b->lmr->lkey);
  const enum ibv_wr_opcode refused[] = {IBV_WR_RDMA_READ,
                                        IBV_WR_ATOMIC_CMP_AND_SWP,
                                        IBV_WR_ATOMIC_FETCH_AND_ADD};
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i) {
    struct ibv_send_wr wr = rdma_wr(refused[i], 900 + i, &sge, 1, raddr(b, 0),
                                    b->rmr->rkey, IBV_SEND_SIGNALED);
    wr.wr.atomic.remote_addr = raddr(b, 0);
    wr.wr.atomic.rkey = b->rmr->rkey;
    struct ibv_send_wr* bad = NULL;
    r = ibv_post_send(p.s[0].qp, &wr, &bad);
    check(r == EINVAL && bad == &wr, "a UC post of READ or an atomic is EINVAL",
          "opcode %d: %d", (int)refused[i], r);
  }
  check(extra_wcs(p.s[0].cq, 20) == 0,
        "refused UC posts complete nothing", "a completion came");

  /* A 1 MiB WRITE, a WRITE with immediate data and a SEND; the receiver's
   * completions come in order, so once the SEND is in, so is the rest. */
  const uint32_t kLen = 1 << 20;
  fill(src, kLen, 77);
  fill(src + kLen, 5000, 78);
  memset(b->remote, 0, 2 * kLen + 8192);
  uint8_t* rbuf = b->remote + 2 * kLen;
  struct ibv_sge rsge[2] = {sge_of(rbuf, 16, b->rmr->lkey),
                            sge_of(rbuf + 4096, 8192, b->rmr->lkey)};
  r = post_recv1(&p.s[1], 51, &rsge[0], 1);
  r |= post_recv1(&p.s[1], 52, &rsge[1], 1);
  check(r == 0, "UC ibv_post_recv", "returned %d", r);
  struct ibv_sge wsge = sge_of(src, kLen, b->lmr->lkey);
  struct ibv_sge isge = sge_of(src, 100, b->lmr->lkey);
  struct ibv_sge ssge = sge_of(src + kLen, 5000, b->lmr->lkey);
  struct ibv_send_wr wr[3];
  wr[0] = rdma_wr(IBV_WR_RDMA_WRITE, 61, &wsge, 1, raddr(b, 0), b->rmr->rkey,
                  IBV_SEND_SIGNALED);
  wr[1] = rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 62, &isge, 1, raddr(b, kLen),
                  b->rmr->rkey, IBV_SEND_SIGNALED);
  wr[1].imm_data = htonl(0xC0FFEE);
  wr[2] = rdma_wr(IBV_WR_SEND, 63, &ssge, 1, 0, 0, IBV_SEND_SIGNALED);
  wr[0].next = &wr[1];
  wr[1].next = &wr[2];
  struct ibv_send_wr* bad = NULL;
  r = ibv_post_send(p.s[0].qp, &wr[0], &bad);
  check(r == 0, "UC ibv_post_send of WRITE, WRITE_WITH_IMM and SEND",
        "returned %d", r);
  struct ibv_wc wc[3];
  memset(wc, 0, sizeof(wc));
  int n = wait_wcs(p.s[0].cq, wc, 3, 10000);
  check(n == 3 && wc[0].wr_id == 61 && wc[0].status == IBV_WC_SUCCESS &&
            wc[0].opcode == IBV_WC_RDMA_WRITE && wc[1].wr_id == 62 &&
            wc[1].status == IBV_WC_SUCCESS && wc[2].wr_id == 63 &&
            wc[2].status == IBV_WC_SUCCESS && wc[2].opcode == IBV_WC_SEND,
        "UC sends complete in order, successfully", "%d of 3; first %s",
        n, wc_name(wc[0].status));
  struct ibv_wc rwc[2];
  memset(rwc, 0, sizeof(rwc));
  n = wait_wcs(p.s[1].cq, rwc, 2, 10000);
  check(n == 2 && rwc[0].wr_id == 51 && rwc[0].status == IBV_WC_SUCCESS &&
            rwc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
            (rwc[0].wc_flags & IBV_WC_WITH_IMM) != 0 &&
            ntohl(rwc[0].imm_data) == 0xC0FFEE && rwc[0].byte_len == 100 &&
            rwc[0].qp_num == p.s[1].qp->qp_num,
        "a UC WRITE_WITH_IMM consumes a receive with its immediate data",
        "%d completions; first wr_id %llu %s opcode %d imm %x len %u", n,
        (unsigned long long)rwc[0].wr_id, wc_name(rwc[0].status),
        (int)rwc[0].opcode, ntohl(rwc[0].imm_data), rwc[0].byte_len);
  check(n == 2 && rwc[1].wr_id == 52 && rwc[1].status == IBV_WC_SUCCESS &&
            rwc[1].opcode == IBV_WC_RECV && rwc[1].byte_len == 5000 &&
            first_diff(src + kLen, rbuf + 4096, 5000) == 5000,
        "a UC SEND lands in the next receive", "wr_id %llu %s len %u",
        (unsigned long long)rwc[1].wr_id, wc_name(rwc[1].status),
        rwc[1].byte_len);
  check(first_diff(src, b->remote, kLen) == kLen &&
            first_diff(src, b->remote + kLen, 100) == 100,
        "UC WRITEs land before the messages posted after them",
        "first difference at %zu", first_diff(src, b->remote, kLen));
  free_pair(&p);
}

/* UD (ibv_create_qp(3), ibv_create_ah(3), ibv_post_send(3)'s ud fields,
 * ibv_poll_cq(3)'s src_qp and IBV_WC_GRH): address handles for the
 * IPv4-mapped GID of a daemon, datagrams that land behind a 40-byte GRH,
 * an answer through ibv_create_ah_from_wc, a Q_Key other than the
 * receiver's dropped, and posts a UD queue pair cannot carry refused. */
static void t_ud(struct bufs* b) {
  step("UD queue pairs and address handles");
  enum { kQkey = 0x11111111 };
  struct qp_opts o = kDefaultOpts;
  o.qp_type = IBV_QPT_UD;
  o.max_recv_wr = 8;
  struct pair p;
  memset(&p, 0, sizeof(p));
  if (!make_side(&p.s[0], &g_dev[0], &o) || !make_side(&p.s[1], &g_dev[1], &o)) {
    free_pair(&p);
    return;
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qkey = kQkey;
    int r = ibv_modify_qp(p.s[i].qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT);
    check(r == EINVAL, "UD RESET->INIT without the Q_Key is EINVAL",
          "side %d: %d", i, r);
    r = ibv_modify_qp(p.s[i].qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                          IBV_QP_QKEY);
    check(r == 0, "UD RESET->INIT with pkey index, port and Q_Key",
          "side %d: %d", i, r);
    r = to_state(p.s[i].qp, IBV_QPS_RTR);
    check(r == 0, "UD INIT->RTR with the state alone", "side %d: %d", i, r);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0x123;
    r = ibv_modify_qp(p.s[i].qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    check(r == 0, "UD RTR->RTS with the SQ PSN", "side %d: %d", i, r);
  }
  struct ibv_qp_init_attr qi;
  struct ibv_qp_attr qa;
  int r = ibv_query_qp(p.s[1].qp, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qi);
  check(r == 0 && qi.qp_type == IBV_QPT_UD && qa.qkey == kQkey &&
            qa.qp_state == IBV_QPS_RTS,
        "ibv_query_qp reports a UD queue pair, its Q_Key and RTS",
        "r %d type %d qkey %x state %d", r, qi.qp_type, qa.qkey, qa.qp_state);

  /* Address handles: only an IPv4-mapped GID of port 1. */
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof(aa));
  aa.port_num = 1;
  errno = 0;
  struct ibv_ah* bad_ah = ibv_create_ah(g_dev[0].pd, &aa);
  check(bad_ah == NULL && errno == EINVAL,
        "ibv_create_ah without a GRH (no route on RoCE) is EINVAL",
        "ah %p errno %d", (void*)bad_ah, errno);
  aa.is_global = 1;
  aa.grh.dgid = g_dev[1].gid;
  struct ibv_ah* ah = ibv_create_ah(g_dev[0].pd, &aa);
  check(ah != NULL, "ibv_create_ah for the other daemon's GID", "errno %d",
        errno);
  if (ah == NULL) {
    free_pair(&p);
    return;
  }

  /* Posts a UD queue pair cannot carry. */
  uint8_t* src = b->local;
  fill(src, 4096, 91);
  struct ibv_sge sge = sge_of(src, 64, b->lmr->lkey);
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = p.s[1].qp->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  struct ibv_send_wr* bad = NULL;
  r = ibv_post_send(p.s[0].qp, &wr, &bad);
  check(r == EINVAL && bad == &wr, "a UD post of an RDMA WRITE is EINVAL",
        "returned %d", r);
  wr.opcode = IBV_WR_SEND;
  sge.length = 4097;
  r = ibv_post_send(p.s[0].qp, &wr, &bad);
  check(r == EINVAL, "a UD SEND longer than the path MTU is EINVAL",
        "returned %d", r);
  sge.length = 64;
  wr.wr.ud.ah = NULL;
  r = ibv_post_send(p.s[0].qp, &wr, &bad);
  check(r == EINVAL, "a UD SEND without an address handle is EINVAL",
        "returned %d", r);
  wr.wr.ud.ah = ah;

  /* A datagram under another Q_Key, then one under the receiver's: only
   * the second lands, in the first receive posted. */
  uint8_t* rbuf = b->remote + 3 * (1 << 20);
  memset(rbuf, 0xEE, 3 * 8192);
  for (int i = 0; i < 3; ++i) {
    struct ibv_sge rs = sge_of(rbuf + i * 8192, 4096 + 40, b->rmr->lkey);
    r = post_recv1(&p.s[1], 70 + i, &rs, 1);
    check(r == 0, "UD ibv_post_recv", "returned %d", r);
  }
  wr.wr.ud.remote_qkey = kQkey + 1;
  wr.wr_id = 2;
  r = ibv_post_send(p.s[0].qp, &wr, &bad);
  wr.wr.ud.remote_qkey = kQkey;
  wr.wr_id = 3;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(0xD06);
  sge.length = 4096;  /* a full path MTU */
  r |= ibv_post_send(p.s[0].qp, &wr, &bad);
  check(r == 0, "UD SENDs posted", "returned %d", r);
  struct ibv_wc wc[2];
  memset(wc, 0, sizeof(wc));
  int n = wait_wcs(p.s[0].cq, wc, 2, 10000);
  check(n == 2 && wc[0].status == IBV_WC_SUCCESS &&
            wc[1].status == IBV_WC_SUCCESS && wc[1].opcode == IBV_WC_SEND,
        "UD SENDs complete once sent, whatever the receiver does",
        "%d; %s", n, wc_name(wc[0].status));
  struct ibv_wc rwc;
  memset(&rwc, 0, sizeof(rwc));
  n = wait_wcs(p.s[1].cq, &rwc, 1, 10000);
  uint32_t sender_ip = 0;
  memcpy(&sender_ip, rbuf + 20 + 12, 4);
  check(n == 1 && rwc.wr_id == 70 && rwc.status == IBV_WC_SUCCESS &&
            rwc.opcode == IBV_WC_RECV && rwc.byte_len == 40 + 4096 &&
            (rwc.wc_flags & IBV_WC_GRH) != 0 &&
            (rwc.wc_flags & IBV_WC_WITH_IMM) != 0 &&
            ntohl(rwc.imm_data) == 0xD06 &&
            rwc.src_qp == p.s[0].qp->qp_num &&
            rwc.qp_num == p.s[1].qp->qp_num,
        "only the datagram under the receiver's Q_Key lands, with GRH, "
        "immediate data and the sender's QPN",
        "%d: wr_id %llu %s len %u flags %x src_qp %u", n,
        (unsigned long long)rwc.wr_id, wc_name(rwc.status), rwc.byte_len,
        rwc.wc_flags, rwc.src_qp);
  check(first_diff(src, rbuf + 40, 4096) == 4096 && rbuf[40 + 4096] == 0xEE,
        "the datagram's bytes follow the 40-byte GRH, and nothing more",
        "first difference at %zu", first_diff(src, rbuf + 40, 4096));
  char ip_text[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &sender_ip, ip_text, sizeof(ip_text));
  check(strcmp(ip_text, g_dev[0].ip) == 0,
        "the GRH holds the IPv4 header, its source the sender's daemon",
        "source %s", ip_text);
  /* As mlx5 reports a RoCEv2 datagram over IPv4 in sl (UDP, IPv4), and the
   * GRH's destination GID ends in the receiver's address: UCX's UD
   * transport checks both, and drops what does not match. */
  uint32_t dest_ip = 0;
  memcpy(&dest_ip, rbuf + 36, 4);
  inet_ntop(AF_INET, &dest_ip, ip_text, sizeof(ip_text));
  check(rwc.sl == 0xA && strcmp(ip_text, g_dev[1].ip) == 0,
        "a datagram's completion says RoCEv2 over IPv4 (sl 0xA), and its GRH "
        "ends in the receiver's address",
        "sl %u, destination %s", rwc.sl, ip_text);

  /* An answer to the sender, through the received GRH. */
  struct ibv_ah* back =
      ibv_create_ah_from_wc(g_dev[1].pd, &rwc, (struct ibv_grh*)rbuf, 1);
  check(back != NULL, "ibv_create_ah_from_wc from a received datagram",
        "errno %d", errno);
  if (back != NULL) {
    struct ibv_sge ls = sge_of(b->local2, 4096 + 40, b->lmr2->lkey);
    r = post_recv1(&p.s[0], 80, &ls, 1);
    struct ibv_sge rs = sge_of(rbuf + 40, 100, b->rmr->lkey);
    struct ibv_send_wr answer;
    memset(&answer, 0, sizeof(answer));
    answer.wr_id = 4;
    answer.sg_list = &rs;
    answer.num_sge = 1;
    answer.opcode = IBV_WR_SEND;
    answer.send_flags = IBV_SEND_SIGNALED;
    answer.wr.ud.ah = back;
    answer.wr.ud.remote_qpn = rwc.src_qp;
    answer.wr.ud.remote_qkey = 0x80000000u; /* the sender's own Q_Key */
    r |= ibv_post_send(p.s[1].qp, &answer, &bad);
    check(r == 0, "the answer is posted", "returned %d", r);
    struct ibv_wc awc;
    memset(&awc, 0, sizeof(awc));
    n = wait_wcs(p.s[0].cq, &awc, 1, 10000);
    check(n == 1 && awc.wr_id == 80 && awc.status == IBV_WC_SUCCESS &&
              awc.byte_len == 140 && awc.src_qp == p.s[1].qp->qp_num &&
              first_diff(src, b->local2 + 40, 100) == 100,
          "the answer lands at the first sender", "%d: wr_id %llu %s len %u",
          n, (unsigned long long)awc.wr_id, wc_name(awc.status),
          awc.byte_len);
    (void)drain_cq(p.s[1].cq);
    r = ibv_destroy_ah(back);
    check(r == 0, "ibv_destroy_ah", "returned %d", r);
  }
  struct ibv_wc none;
  memset(&none, 0, sizeof(none));
  errno = 0;
  struct ibv_ah* no_grh = ibv_create_ah_from_wc(g_dev[1].pd, &none,
                                                (struct ibv_grh*)rbuf, 1);
  check(no_grh == NULL && errno == EINVAL,
        "ibv_create_ah_from_wc of a completion without a GRH is EINVAL",
        "ah %p errno %d", (void*)no_grh, errno);
  r = ibv_dealloc_pd(g_dev[0].pd);
  check(r == EBUSY, "ibv_dealloc_pd while an address handle uses it is EBUSY",
        "returned %d", r);
  r = ibv_destroy_ah(ah);
  check(r == 0, "ibv_destroy_ah", "returned %d", r);
  free_pair(&p);
}

/* --- The extended API: ibv_create_cq_ex, ibv_create_qp_ex, ibv_wr_* ------- */

/* Polls an extended CQ (ibv_start_poll, ibv_next_poll, ibv_end_poll) until
 * `want` completions are in out[] or 10 s passed; each is read back field
 * by field through the ibv_wc_read_* functions. Returns how many came. */
static int ex_poll(struct ibv_cq_ex* cq, struct ibv_wc* out, int want) {
  int got = 0;
  const double until = now_s() + 10;
  while (got < want && now_s() < until) {
    struct ibv_poll_cq_attr attr;
    memset(&attr, 0, sizeof(attr));
    int r = ibv_start_poll(cq, &attr);
    if (r == ENOENT) {
      sleep_us(50);
      continue;
    }
    if (r != 0) {
      check(false, "ibv_start_poll", "returned %d", r);
      return got;
    }
    do {
      struct ibv_wc* w = &out[got++];
      memset(w, 0, sizeof(*w));
      w->wr_id = cq->wr_id;
      w->status = cq->status;
      w->opcode = ibv_wc_read_opcode(cq);
      w->byte_len = ibv_wc_read_byte_len(cq);
      w->imm_data = ibv_wc_read_imm_data(cq);
      w->qp_num = ibv_wc_read_qp_num(cq);
      w->src_qp = ibv_wc_read_src_qp(cq);
      w->wc_flags = ibv_wc_read_wc_flags(cq);
      w->vendor_err = ibv_wc_read_vendor_err(cq);
    } while (got < want && (r = ibv_next_poll(cq)) == 0);
    check(r == 0 || r == ENOENT, "ibv_next_poll", "returned %d", r);
    ibv_end_poll(cq);
  }
  return got;
}

static struct ibv_cq_ex* make_cq_ex(struct dev* d) {
  struct ibv_cq_init_attr_ex a;
  memset(&a, 0, sizeof(a));
  a.cqe = 256;
  a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
               IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  return ibv_create_cq_ex(d->ctx, &a);
}

static struct ibv_qp* make_qp_ex(struct dev* d, struct ibv_cq_ex* cq,
                                 enum ibv_qp_type type, uint64_t ops) {
  struct ibv_qp_init_attr_ex a;
  memset(&a, 0, sizeof(a));
  a.send_cq = ibv_cq_ex_to_cq(cq);
  a.recv_cq = ibv_cq_ex_to_cq(cq);
  a.qp_type = type;
  a.cap.max_send_wr = 16;
  a.cap.max_recv_wr = 16;
  a.cap.max_send_sge = 4;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = 64;
  a.pd = d->pd;
  a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  a.send_ops_flags = ops;
  return ibv_create_qp_ex(d->ctx, &a);
}

/* Posts one signaled WRITE of 8 bytes through ibv_post_send and checks
 * that it is the next completion: nothing a refused or aborted batch held
 * went out before it (an RC queue completes in order). */
static void check_next_is(struct side* s, struct ibv_cq_ex* cq,
                          struct bufs* b, uint64_t wr_id, const char* name) {
  struct ibv_sge sge = sge_of(b->local, 8, b->lmr->lkey);
  struct ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, wr_id, &sge, 1,
                                  raddr(b, 3 << 20), b->rmr->rkey,
                                  IBV_SEND_SIGNALED);
  struct ibv_send_wr* bad = NULL;
  int r = ibv_post_send(s->qp, &wr, &bad);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  const int n = r == 0 ? ex_poll(cq, &wc, 1) : 0;
  check(n == 1 && wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS, name,
        "post %d; %d: wr_id %llu %s", r, n, (unsigned long long)wc.wr_id,
        wc_name(wc.status));
}

static void t_extended_refusals(void) {
  step("the extended API: what is refused");
  struct dev* d = &g_dev[0];
  struct ibv_cq_init_attr_ex ca;
  memset(&ca, 0, sizeof(ca));
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  errno = 0;
  struct ibv_cq_ex* cq = ibv_create_cq_ex(d->ctx, &ca);
  check(cq == NULL && errno == EOPNOTSUPP,
        "ibv_create_cq_ex asking for completion timestamps is EOPNOTSUPP",
        "cq %p errno %d", (void*)cq, errno);
  ca.wc_flags = 0;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  errno = 0;
  cq = ibv_create_cq_ex(d->ctx, &ca);
  check(cq == NULL && errno == EOPNOTSUPP,
        "ibv_create_cq_ex with a parent domain is EOPNOTSUPP",
        "cq %p errno %d", (void*)cq, errno);
  ca.comp_mask = 0;
  ca.cqe = 0;
  errno = 0;
  cq = ibv_create_cq_ex(d->ctx, &ca);
  check(cq == NULL && errno == EINVAL, "ibv_create_cq_ex of 0 entries is EINVAL",
        "cq %p errno %d", (void*)cq, errno);
  cq = make_cq_ex(d);
  if (!check(cq != NULL, "ibv_create_cq_ex", "errno %d", errno)) return;
  struct {
    enum ibv_qp_type type;
    uint64_t ops;
    const char* name;
  } refused[] = {
      {IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV,
       "a UC queue pair for SEND_WITH_INV is EOPNOTSUPP (the IBA has no UC "
       "opcode for it)"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW,
       "a UD queue pair for BIND_MW is EOPNOTSUPP (UD has none)"},
      {IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ,
       "a UC queue pair for RDMA READ is EOPNOTSUPP (UC has none)"},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE,
       "a UD queue pair for RDMA WRITE is EOPNOTSUPP (UD has none)"},
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i) {
    errno = 0;
    struct ibv_qp* qp = make_qp_ex(d, cq, refused[i].type, refused[i].ops);
    check(qp == NULL && errno == EOPNOTSUPP, refused[i].name,
          "qp %p errno %d", (void*)qp, errno);
    if (qp != NULL) ibv_destroy_qp(qp);
  }
  struct ibv_qp_init_attr_ex qa;
  memset(&qa, 0, sizeof(qa));
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq);
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.pd = d->pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  qa.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  errno = 0;
  struct ibv_qp* qp = ibv_create_qp_ex(d->ctx, &qa);
  check(qp == NULL && errno == EOPNOTSUPP,
        "ibv_create_qp_ex with a creation flag is EOPNOTSUPP",
        "qp %p errno %d", (void*)qp, errno);
  if (qp != NULL) ibv_destroy_qp(qp);
  qa.comp_mask = IBV_QP_INIT_ATTR_PD;
  qp = ibv_create_qp_ex(d->ctx, &qa);
  if (check(qp != NULL, "ibv_create_qp_ex with a PD alone", "errno %d",
            errno)) {
    check(ibv_qp_to_qp_ex(qp) == NULL,
          "ibv_qp_to_qp_ex of a queue pair made without send_ops_flags is "
          "NULL",
          "not NULL");
    ibv_destroy_qp(qp);
  }
  /* A batch outside RTS is refused whole. */
  qp = make_qp_ex(d, cq, IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
  if (check(qp != NULL, "an extended RC queue pair", "errno %d", errno)) {
    struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
    check(qpx != NULL && ibv_qp_to_qp_ex(qp) == (struct ibv_qp_ex*)qp &&
              &qpx->qp_base == qp,
          "ibv_qp_to_qp_ex finds the extended queue pair around the ibv_qp",
          "%p for %p", (void*)qpx, (void*)qp);
    if (qpx != NULL) {
      int r = ibv_wr_complete(qpx);
      check(r == EINVAL, "ibv_wr_complete without ibv_wr_start is EINVAL",
            "returned %d", r);
      ibv_wr_start(qpx);
      qpx->wr_id = 1;
      qpx->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_send(qpx);
      r = ibv_wr_complete(qpx);
      check(r == EINVAL, "ibv_wr_complete in RESET is EINVAL", "returned %d",
            r);
      struct ibv_poll_cq_attr pa;
      memset(&pa, 0, sizeof(pa));
      r = ibv_start_poll(cq, &pa);
      check(r == ENOENT,
            "ibv_start_poll of an empty CQ is ENOENT (nothing was posted)",
            "returned %d", r);
      if (r == 0) ibv_end_poll(cq);
    }
    ibv_destroy_qp(qp);
  }
  int r = ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  check(r == 0, "ibv_destroy_cq of an extended CQ", "returned %d", r);
}

/* An RC pair of extended queue pairs for `ops`, each on an extended CQ
 * (cq[i], also p->s[i].cq): false (a failed check) when one cannot be
 * made; free_pair frees what was. */
static bool make_pair_ex(struct pair* p, struct ibv_cq_ex* cq[2],
                         uint64_t ops) {
  memset(p, 0, sizeof(*p));
  for (int i = 0; i < 2; ++i) {
    p->s[i].dev = &g_dev[i];
    cq[i] = make_cq_ex(&g_dev[i]);
    if (cq[i] == NULL) return check(false, "ibv_create_cq_ex", "errno %d", errno);
    p->s[i].cq = ibv_cq_ex_to_cq(cq[i]);
    p->s[i].qp = make_qp_ex(&g_dev[i], cq[i], IBV_QPT_RC, ops);
    if (p->s[i].qp == NULL) {
      return check(false, "ibv_create_qp_ex with send_ops_flags", "errno %d",
                   errno);
    }
  }
  return true;
}

static void t_extended(struct bufs* b) {
  t_extended_refusals();
  step("the extended API: ibv_wr_* posts, ibv_start_poll reads");
  /* Everything an RC queue pair serves but COMPARE SWAP. */
  const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE |
                       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                       IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  struct pair p;
  struct ibv_cq_ex* cq[2] = {NULL, NULL};
  const bool made = make_pair_ex(&p, cq, ops);
  if (!made || !pair_to_init(&p) ||
      !pair_to_rts(&p, &kDefaultOpts, &kDefaultOpts)) {
    free_pair(&p);
    return;
  }
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(p.s[0].qp);

  /* One batch: a WRITE of two SGEs, an inline SEND_WITH_IMM whose source
   * is overwritten at once, a READ and a FETCH_ADD. */
  uint8_t* w_src = b->local;
  uint8_t* r_dst = b->local + 65536;
  uint8_t* fa_dst = b->local + 2 * 65536;
  uint8_t* w_dst = b->remote;
  uint8_t* r_src = b->remote + 65536;
  uint8_t* fa_word = pages(4096);
  struct ibv_mr* amr = reg(&g_dev[1], fa_word, 4096,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
                           "atomic MR");
  if (amr == NULL) {
    free_pair(&p);
    return;
  }
  const uint64_t fa_addr = (uint64_t)(uintptr_t)fa_word;
  fill(w_src, 6000, 101);
  fill(r_src, 3000, 102);
  memset(w_dst, 0xEE, 6100);
  memset(r_dst, 0xEE, 3100);
  memset(area(b, 3), 0xEE, 128);
  set_word(fa_word, 1000);
  set_word(fa_dst, 0);
  int r = post_recv_area(&p.s[1], b, 3, 500, 128);
  check(r == 0, "a receive for the inline SEND", "returned %d", r);
  char message[40];
  memset(message, 'm', sizeof(message));
  const struct ibv_sge two[2] = {sge_of(w_src, 4000, b->lmr->lkey),
                                 sge_of(w_src + 4000, 2000, b->lmr->lkey)};
  ibv_wr_start(qpx);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  qpx->wr_id = 501;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 0));
  ibv_wr_set_sge_list(qpx, 2, two);
  qpx->wr_id = 502;
  ibv_wr_send_imm(qpx, htonl(0xE7E7));
  ibv_wr_set_inline_data(qpx, message, sizeof(message));
  memset(message, 'x', sizeof(message)); /* copied already */
  qpx->wr_id = 503;
  ibv_wr_rdma_read(qpx, b->rmr->rkey, raddr(b, 65536));
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)r_dst, 3000);
  qpx->wr_id = 504;
  ibv_wr_atomic_fetch_add(qpx, amr->rkey, fa_addr, 5);
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)fa_dst, 8);
  r = ibv_wr_complete(qpx);
  check(r == 0, "ibv_wr_complete of WRITE, SEND_WITH_IMM (inline), READ and "
        "FETCH_ADD", "returned %d", r);
  struct ibv_wc wc[4];
  memset(wc, 0, sizeof(wc));
  int n = r == 0 ? ex_poll(cq[0], wc, 4) : 0;
  static const enum ibv_wc_opcode kOps[4] = {IBV_WC_RDMA_WRITE, IBV_WC_SEND,
                                             IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD};
  bool in_order = n == 4;
  for (int i = 0; i < n; ++i) {
    if (wc[i].wr_id != 501 + (uint64_t)i || wc[i].status != IBV_WC_SUCCESS ||
        wc[i].opcode != kOps[i] || wc[i].qp_num != p.s[0].qp->qp_num) {
      in_order = false;
    }
  }
  check(in_order,
        "four completions through ibv_start_poll/ibv_next_poll: their wr_ids "
        "in order, each successful, with its opcode and QP number",
        "%d; first: wr_id %llu %s opcode %d qp %u", n,
        (unsigned long long)wc[0].wr_id, wc_name(wc[0].status), wc[0].opcode,
        wc[0].qp_num);
  check(n >= 3 && wc[2].byte_len == 3000,
        "the READ's completion reads back its byte_len", "byte_len %u",
        wc[2].byte_len);
  check(first_diff(w_src, w_dst, 6000) == 6000 && all_bytes(w_dst + 6000, 100, 0xEE),
        "the WRITE of two SGEs landed, and only there",
        "first difference at %zu", first_diff(w_src, w_dst, 6000));
  check(first_diff(r_src, r_dst, 3000) == 3000 && all_bytes(r_dst + 3000, 100, 0xEE),
        "the READ brought the remote bytes", "first difference at %zu",
        first_diff(r_src, r_dst, 3000));
  check(word_at(fa_dst) == 1000 && word_at(fa_word) == 1005,
        "FETCH_ADD returned the old value and added", "returned %llu, now %llu",
        (unsigned long long)word_at(fa_dst), (unsigned long long)word_at(fa_word));
  struct ibv_wc rwc;
  memset(&rwc, 0, sizeof(rwc));
  n = ex_poll(cq[1], &rwc, 1);
  check(n == 1 && rwc.wr_id == 500 && rwc.status == IBV_WC_SUCCESS &&
            rwc.opcode == IBV_WC_RECV && rwc.byte_len == 40 &&
            (rwc.wc_flags & IBV_WC_WITH_IMM) != 0 &&
            ntohl(rwc.imm_data) == 0xE7E7 &&
            rwc.qp_num == p.s[1].qp->qp_num &&
            rwc.src_qp == p.s[0].qp->qp_num,
        "the receive, read through ibv_wc_read_*: RECV, 40 bytes, its "
        "immediate data, its QP and the sender's",
        "%d: wr_id %llu %s opcode %d len %u flags %#x imm %#x qp %u src %u", n,
        (unsigned long long)rwc.wr_id, wc_name(rwc.status), rwc.opcode,
        rwc.byte_len, rwc.wc_flags, ntohl(rwc.imm_data), rwc.qp_num,
        rwc.src_qp);
  memset(message, 'm', sizeof(message));
  check(memcmp(area(b, 3), message, sizeof(message)) == 0 &&
            all_bytes(area(b, 3) + 40, 88, 0xEE),
        "the inline SEND carried the bytes as they were when it was built",
        "%.8s...", (const char*)area(b, 3));

  /* A mistake anywhere refuses the whole batch. */
  memset(w_dst, 0xEE, 64);
  struct ibv_sge five[5];
  for (int i = 0; i < 5; ++i) five[i] = sge_of(w_src + i * 8, 8, b->lmr->lkey);
  ibv_wr_start(qpx);
  qpx->wr_id = 510;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 0));
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)w_src, 64);
  qpx->wr_id = 511;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 64));
  ibv_wr_set_sge_list(qpx, 5, five); /* max_send_sge is 4 */
  r = ibv_wr_complete(qpx);
  check(r == EINVAL, "a batch with more SGEs than max_send_sge is EINVAL",
        "returned %d", r);
  check_next_is(&p.s[0], cq[0], b, 512,
                "... and none of it was posted: the next completion is the "
                "next request's");
  check(all_bytes(w_dst, 64, 0xEE), "... and the remote bytes are untouched",
        "changed");
  ibv_wr_start(qpx);
  qpx->wr_id = 513;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 0));
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)w_src, 64);
  qpx->wr_id = 514;
  ibv_wr_atomic_cmp_swp(qpx, amr->rkey, fa_addr, 1005, 7);
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)fa_dst, 8);
  r = ibv_wr_complete(qpx);
  check(r == EINVAL,
        "a batch with an operation the queue pair was not made for "
        "(COMPARE SWAP) is EINVAL",
        "returned %d", r);
  check_next_is(&p.s[0], cq[0], b, 515,
                "... and none of it was posted");
  check(all_bytes(w_dst, 64, 0xEE) && word_at(fa_word) == 1005,
        "... the remote bytes and word untouched", "word %llu",
        (unsigned long long)word_at(fa_word));
  ibv_wr_start(qpx);
  qpx->wr_id = 516;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 0));
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)w_src, 64);
  ibv_wr_abort(qpx);
  check_next_is(&p.s[0], cq[0], b, 517,
                "ibv_wr_abort drops the batch: the next completion is the "
                "next request's");
  check(all_bytes(w_dst, 64, 0xEE), "... and the remote bytes are untouched",
        "changed");
  ibv_wr_start(qpx);
  qpx->wr_id = 518;
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)w_src, 64);
  r = ibv_wr_complete(qpx);
  check(r == EINVAL, "a setter before any builder is EINVAL", "returned %d",
        r);
  qpx->wr_flags = 0;
  ibv_wr_start(qpx);
  qpx->wr_id = 519;
  ibv_wr_send(qpx);
  ibv_wr_set_inline_data(qpx, w_src, 65); /* max_inline_data is 64 */
  r = ibv_wr_complete(qpx);
  check(r == EINVAL, "inline data beyond max_inline_data is EINVAL",
        "returned %d", r);

  /* In ERR a batch completes flushed. */
  r = to_state(p.s[0].qp, IBV_QPS_ERR);
  check(r == 0, "to ERR", "returned %d", r);
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_start(qpx);
  qpx->wr_id = 520;
  ibv_wr_send(qpx);
  qpx->wr_id = 521;
  ibv_wr_rdma_write(qpx, b->rmr->rkey, raddr(b, 0));
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)w_src, 64);
  r = ibv_wr_complete(qpx);
  memset(wc, 0, sizeof(wc));
  n = r == 0 ? ex_poll(cq[0], wc, 2) : 0;
  check(r == 0 && n == 2 && wc[0].wr_id == 520 &&
            wc[0].status == IBV_WC_WR_FLUSH_ERR && wc[1].wr_id == 521 &&
            wc[1].status == IBV_WC_WR_FLUSH_ERR,
        "in ERR a batch is taken, and each of its requests completes flushed",
        "complete %d; %d: %llu %s", r, n, (unsigned long long)wc[0].wr_id,
        wc_name(wc[0].status));
  free_pair(&p);
  dereg(amr);
}

/* Memory windows through the extended API: ibv_wr_bind_mw,
 * ibv_wr_send_inv, ibv_wr_local_inv; the receive's invalidated key read
 * with ibv_wc_read_invalidated_rkey. */
static void t_extended_windows(struct bufs* b) {
  step("the extended API: ibv_wr_bind_mw, ibv_wr_send_inv, ibv_wr_local_inv");
  const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                       IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                       IBV_QP_EX_WITH_SEND_WITH_INV;
  struct pair p;
  struct ibv_cq_ex* cq[2] = {NULL, NULL};
  const bool made = check(make_pair_ex(&p, cq, ops),
                          "ibv_create_qp_ex for BIND_MW, LOCAL_INV and "
                          "SEND_WITH_INV",
                          "failed");
  uint8_t* mem = pages(8192);
  struct ibv_mr* mr = reg(&g_dev[1], mem, 8192,
                          kRemoteAccess | IBV_ACCESS_MW_BIND, "an MR for binding");
  struct ibv_mw* mw = ibv_alloc_mw(g_dev[1].pd, IBV_MW_TYPE_2);
  if (!made || mr == NULL || mw == NULL || !pair_to_init(&p) ||
      !pair_to_rts(&p, &kDefaultOpts, &kDefaultOpts)) {
    if (mw != NULL) ibv_dealloc_mw(mw);
    dereg(mr);
    free_pair(&p);
    return;
  }
  struct ibv_qp_ex* mem_side = ibv_qp_to_qp_ex(p.s[1].qp);
  struct ibv_qp_ex* peer = ibv_qp_to_qp_ex(p.s[0].qp);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  struct ibv_mw_bind_info bi;
  memset(&bi, 0, sizeof(bi));
  bi.mr = mr;
  bi.addr = (uint64_t)(uintptr_t)mem;
  bi.length = 4096;
  bi.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
  ibv_wr_start(mem_side);
  mem_side->wr_id = 7600;
  mem_side->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(mem_side, mw, key, &bi);
  int r = ibv_wr_complete(mem_side);
  struct ibv_wc wc[2];
  int n = r == 0 ? ex_poll(cq[1], wc, 1) : 0;
  check(r == 0 && n == 1 && wc[0].wr_id == 7600 &&
            wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_BIND_MW,
        "ibv_wr_bind_mw binds a type 2 window (IBV_WC_BIND_MW)",
        "complete %d, %d completions, status %s", r, n,
        n ? wc_name(wc[0].status) : "none");
  /* A WRITE through it, then a SEND with Invalidate of its key. */
  r = post_recv_area(&p.s[1], b, 5, 7601, 256);
  fill(b->local, 512, 77);
  ibv_wr_start(peer);
  peer->wr_flags = IBV_SEND_SIGNALED;
  peer->wr_id = 7602;
  ibv_wr_rdma_write(peer, key, (uint64_t)(uintptr_t)mem);
  ibv_wr_set_sge(peer, b->lmr->lkey, (uint64_t)(uintptr_t)b->local, 512);
  peer->wr_id = 7603;
  ibv_wr_send_inv(peer, key);
  ibv_wr_set_sge(peer, b->lmr->lkey, (uint64_t)(uintptr_t)b->local, 64);
  r = r == 0 ? ibv_wr_complete(peer) : r;
  n = r == 0 ? ex_poll(cq[0], wc, 2) : 0;
  check(r == 0 && n == 2 && wc[0].status == IBV_WC_SUCCESS &&
            wc[1].status == IBV_WC_SUCCESS && wc[1].opcode == IBV_WC_SEND &&
            first_diff(mem, b->local, 512) == 512,
        "ibv_wr_rdma_write through the window and ibv_wr_send_inv complete",
        "complete %d, %d completions", r, n);
  /* The receive: read through the extended CQ. */
  struct ibv_poll_cq_attr attr;
  memset(&attr, 0, sizeof(attr));
  const double until = now_s() + 10;
  while ((r = ibv_start_poll(cq[1], &attr)) == ENOENT && now_s() < until) {
    sleep_us(50);
  }
  bool ok = r == 0 && cq[1]->wr_id == 7601 && cq[1]->status == IBV_WC_SUCCESS &&
            ibv_wc_read_opcode(cq[1]) == IBV_WC_RECV &&
            (ibv_wc_read_wc_flags(cq[1]) & IBV_WC_WITH_INV) != 0 &&
            ibv_wc_read_invalidated_rkey(cq[1]) == key;
  if (r == 0) ibv_end_poll(cq[1]);
  check(ok,
        "the receive reads IBV_WC_WITH_INV and the key from "
        "ibv_wc_read_invalidated_rkey",
        "start_poll %d", r);
  /* Invalidated: LOCAL_INV of the free window completes (nothing to do),
   * and a WRITE under the key fails. */
  ibv_wr_start(mem_side);
  mem_side->wr_id = 7604;
  mem_side->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(mem_side, key);
  r = ibv_wr_complete(mem_side);
  n = r == 0 ? ex_poll(cq[1], wc, 1) : 0;
  check(r == 0 && n == 1 && wc[0].status == IBV_WC_SUCCESS &&
            wc[0].opcode == IBV_WC_LOCAL_INV,
        "ibv_wr_local_inv of a window the peer invalidated completes",
        "complete %d, %d completions, status %s", r, n,
        n ? wc_name(wc[0].status) : "none");
  ibv_wr_start(peer);
  peer->wr_flags = IBV_SEND_SIGNALED;
  peer->wr_id = 7605;
  ibv_wr_rdma_write(peer, key, (uint64_t)(uintptr_t)mem);
  ibv_wr_set_sge(peer, b->lmr->lkey, (uint64_t)(uintptr_t)b->local, 8);
  r = ibv_wr_complete(peer);
  n = r == 0 ? ex_poll(cq[0], wc, 1) : 0;
  check(r == 0 && n == 1 && wc[0].status == IBV_WC_REM_ACCESS_ERR,
        "a WRITE under the invalidated key completes with "
        "IBV_WC_REM_ACCESS_ERR",
        "complete %d, %d completions, status %s", r, n,
        n ? wc_name(wc[0].status) : "none");
  free_pair(&p);  /* its CQs too */
  r = ibv_dealloc_mw(mw);
  check(r == 0, "ibv_dealloc_mw", "returned %d", r);
  dereg(mr);
}

static void t_extended_ud(struct bufs* b) {
  step("the extended API: a UD SEND through ibv_wr_set_ud_addr");
  enum { kQkey = 0x2222 };
  struct pair p;
  memset(&p, 0, sizeof(p));
  struct ibv_cq_ex* cq[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    p.s[i].dev = &g_dev[i];
    cq[i] = make_cq_ex(&g_dev[i]);
    if (!check(cq[i] != NULL, "ibv_create_cq_ex", "errno %d", errno)) {
      free_pair(&p);
      return;
    }
    p.s[i].cq = ibv_cq_ex_to_cq(cq[i]);
    p.s[i].qp = make_qp_ex(&g_dev[i], cq[i], IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
    if (!check(p.s[i].qp != NULL, "an extended UD queue pair", "errno %d",
               errno)) {
      free_pair(&p);
      return;
    }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    int r = ibv_modify_qp(p.s[i].qp, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                              IBV_QP_QKEY);
    r |= to_state(p.s[i].qp, IBV_QPS_RTR);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    r |= ibv_modify_qp(p.s[i].qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    if (!check(r == 0, "UD RESET->INIT->RTR->RTS", "side %d", i)) {
      free_pair(&p);
      return;
    }
  }
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof(aa));
  aa.port_num = 1;
  aa.is_global = 1;
  aa.grh.dgid = g_dev[1].gid;
  struct ibv_ah* ah = ibv_create_ah(g_dev[0].pd, &aa);
  if (!check(ah != NULL, "ibv_create_ah", "errno %d", errno)) {
    free_pair(&p);
    return;
  }
  uint8_t* rbuf = area(b, 5);
  memset(rbuf, 0xEE, 40 + 300);
  int r = post_recv_area(&p.s[1], b, 5, 600, 40 + 256);
  fill(b->local, 256, 103);
  struct ibv_qp_ex* qpx = ibv_qp_to_qp_ex(p.s[0].qp);
  ibv_wr_start(qpx);
  qpx->wr_id = 601;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_ud_addr(qpx, ah, p.s[1].qp->qp_num, kQkey);
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)b->local, 256);
  r |= ibv_wr_complete(qpx);
  struct ibv_wc swc, rwc;
  memset(&swc, 0, sizeof(swc));
  memset(&rwc, 0, sizeof(rwc));
  const int sn = r == 0 ? ex_poll(cq[0], &swc, 1) : 0;
  const int rn = r == 0 ? ex_poll(cq[1], &rwc, 1) : 0;
  check(sn == 1 && swc.wr_id == 601 && swc.status == IBV_WC_SUCCESS,
        "the UD SEND built with ibv_wr_set_ud_addr completes",
        "post %d; %d: %s", r, sn, wc_name(swc.status));
  check(rn == 1 && rwc.wr_id == 600 && rwc.status == IBV_WC_SUCCESS &&
            rwc.byte_len == 40 + 256 && (rwc.wc_flags & IBV_WC_GRH) != 0 &&
            rwc.src_qp == p.s[0].qp->qp_num &&
            first_diff(b->local, rbuf + 40, 256) == 256 &&
            rbuf[40 + 256] == 0xEE,
        "... and lands after the GRH; ibv_wc_read_wc_flags says GRH and "
        "ibv_wc_read_src_qp names the sender",
        "%d: %s len %u flags %#x src %u", rn, wc_name(rwc.status),
        rwc.byte_len, rwc.wc_flags, rwc.src_qp);
  ibv_wr_start(qpx);
  qpx->wr_id = 602;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, b->lmr->lkey, (uint64_t)(uintptr_t)b->local, 16);
  r = ibv_wr_complete(qpx);
  check(r == EINVAL, "a UD SEND without ibv_wr_set_ud_addr is EINVAL",
        "returned %d", r);
  ibv_destroy_ah(ah);
  free_pair(&p);
}

/* Resident kB of this process's mappings of a session region (every
 * opened device has one), the largest. */
static long session_rss_kb(void) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[512];
  bool in_session = false;
  long best = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strchr(line, '-') != NULL && strstr(line, " rw") != NULL &&
        isxdigit((unsigned char)line[0])) {
      in_session = strstr(line, "rdmaplane-session") != NULL;
    } else if (in_session && strncmp(line, "Rss:", 4) == 0) {
      long kb = atol(line + 4);
      if (kb > best) best = kb;
    }
  }
  fclose(f);
  return best;
}

/* ibv_query_device's max_qp queue pairs on one device (1056: the session's
 * 1024 slots and its 32 deep ones, which take queue pairs of ordinary depth
 * once the others are used), the next one refused with ENOMEM; the
 * session's shared memory grows with the queue pairs made, not with the
 * 1056 it has room for. */
static void t_many_qps(void) {
  step("1056 queue pairs on one device");
  struct dev* d = &g_dev[0];
  struct ibv_device_attr attr;
  int r = ibv_query_device(d->ctx, &attr);
  check(r == 0 && attr.max_qp == 1056, "ibv_query_device: max_qp 1056",
        "r %d max_qp %d", r, attr.max_qp);
  if (r != 0 || attr.max_qp <= 0) return;
  struct ibv_cq* cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
  if (cq == NULL) {
    check(false, "ibv_create_cq", "errno %d", errno);
    return;
  }
  const long before_kb = session_rss_kb();
  struct ibv_qp** qps = calloc((size_t)attr.max_qp + 1, sizeof(*qps));
  int made = 0;
  for (int i = 0; i <= attr.max_qp; ++i) {
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = (i % 3 == 0) ? IBV_QPT_RC : (i % 3 == 1) ? IBV_QPT_UC
                                                            : IBV_QPT_UD;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    errno = 0;
    qps[i] = ibv_create_qp(d->pd, &init);
    if (qps[i] == NULL) break;
    ++made;
  }
  check(made == attr.max_qp, "max_qp queue pairs are created",
        "%d of %d (errno %d)", made, attr.max_qp, errno);
  check(made == attr.max_qp && qps[made] == NULL && errno == ENOMEM,
        "the next one fails with ENOMEM", "made %d errno %d", made, errno);
  const long after_kb = session_rss_kb();
  /* Each queue pair's rings are formatted (a page or so of each touched);
   * the region itself reserves about 156 MiB. */
  check(before_kb >= 0 && after_kb - before_kb < 32 * 1024,
        "the session's shared memory grows with the queue pairs made",
        "resident %ld kB before, %ld kB after %d queue pairs", before_kb,
        after_kb, made);
  printf("    resident session memory: %ld kB before, %ld kB with %d more "
         "queue pairs\n", before_kb, after_kb, made);
  for (int i = 0; i < made; ++i) {
    if (ibv_destroy_qp(qps[i]) != 0) {
      check(false, "ibv_destroy_qp of many", "queue pair %d", i);
      break;
    }
  }
  free(qps);
  check(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq after 1056 queue pairs",
        "failed");
}

/* Takes one asynchronous event of `type` for `what` within 10 s. */
static bool take_async(struct ibv_context* c, enum ibv_event_type type,
                       const void* what) {
  if (!async_ready(c, 10000)) return false;
  struct ibv_async_event ev;
  if (ibv_get_async_event(c, &ev) != 0) return false;
  const bool ok =
      ev.event_type == type &&
      (type == IBV_EVENT_SRQ_LIMIT_REACHED ? (const void*)ev.element.srq
                                           : (const void*)ev.element.qp) ==
          what;
  ibv_ack_async_event(&ev);
  return ok;
}

/* Shared receive queues (ibv_create_srq(3), ibv_post_srq_recv(3),
 * ibv_modify_srq(3)): two queue pairs take their receives from one queue,
 * in the order messages come; the limit event and the last-WQE event;
 * what is refused. */
static void t_srq(struct bufs* b) {
  step("shared receive queues");
  struct dev* d = &g_dev[1];
  struct ibv_device_attr da;
  if (ibv_query_device(d->ctx, &da) != 0) {
    check(false, "ibv_query_device", "errno %d", errno);
    return;
  }
  struct ibv_srq_init_attr sa;
  memset(&sa, 0, sizeof(sa));
  sa.attr.max_wr = (uint32_t)da.max_srq_wr + 1;
  sa.attr.max_sge = 1;
  errno = 0;
  struct ibv_srq* too_big = ibv_create_srq(d->pd, &sa);
  check(too_big == NULL && errno == EINVAL,
        "ibv_create_srq beyond max_srq_wr receives is EINVAL",
        "max_srq_wr %d: srq %p errno %d", da.max_srq_wr, (void*)too_big,
        errno);
  sa.attr.max_wr = (uint32_t)da.max_srq_wr;
  struct ibv_srq* largest = ibv_create_srq(d->pd, &sa);
  check(largest != NULL, "ibv_create_srq of max_srq_wr receives",
        "max_srq_wr %d: errno %d", da.max_srq_wr, errno);
  if (largest != NULL) ibv_destroy_srq(largest);
  sa.attr.max_wr = 8;
  struct ibv_srq* srq = ibv_create_srq(d->pd, &sa);
  check(srq != NULL, "ibv_create_srq", "errno %d", errno);
  if (srq == NULL) return;
  struct ibv_srq_attr qa;
  int r = ibv_query_srq(srq, &qa);
  check(r == 0 && qa.max_wr == 8 && qa.max_sge == 1 && qa.srq_limit == 0,
        "ibv_query_srq", "r %d max_wr %u", r, qa.max_wr);

  /* Two pairs; the receiving ends (on rdmaplane1) share the queue. */
  struct pair p[2];
  memset(p, 0, sizeof(p));
  bool ok = true;
  for (int k = 0; k < 2 && ok; ++k) {
    ok = make_side(&p[k].s[0], &g_dev[0], &kDefaultOpts);
    struct side* rcv = &p[k].s[1];
    rcv->dev = d;
    rcv->cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr init;
    memset(&init, 0, sizeof(init));
    init.send_cq = rcv->cq;
    init.recv_cq = rcv->cq;
    init.srq = srq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 4;
    init.cap.max_send_sge = 1;
    rcv->qp = ok && rcv->cq != NULL ? ibv_create_qp(d->pd, &init) : NULL;
    ok = ok && rcv->qp != NULL && rcv->qp->srq == srq;
    ok = ok && pair_to_init(&p[k]) && pair_to_rts(&p[k], &kDefaultOpts,
                                                   &kDefaultOpts);
  }
  check(ok, "queue pairs with a shared receive queue connect", "errno %d",
        errno);
  if (ok) {
    struct ibv_sge rs = sge_of(b->remote, 64, b->rmr->lkey);
    struct ibv_recv_wr rwr = recv_wr(1, &rs, 1);
    struct ibv_recv_wr* rbad = NULL;
    r = ibv_post_recv(p[0].s[1].qp, &rwr, &rbad);
    check(r == EINVAL && rbad == &rwr,
          "ibv_post_recv on a queue pair with a shared receive queue is EINVAL",
          "returned %d", r);
    r = ibv_destroy_srq(srq);
    check(r == EBUSY, "ibv_destroy_srq while queue pairs use it is EBUSY",
          "returned %d", r);
    /* Four receives, 1 KiB apart; three messages: A, B, A. */
    struct ibv_recv_wr wrs[4];
    struct ibv_sge sges[4];
    for (int i = 0; i < 4; ++i) {
      sges[i] = sge_of(b->remote + 1024 * i, 1024, b->rmr->lkey);
      wrs[i] = recv_wr(100 + i, &sges[i], 1);
      wrs[i].next = i < 3 ? &wrs[i + 1] : NULL;
    }
    memset(b->remote, 0, 4096);
    r = ibv_post_srq_recv(srq, &wrs[0], &rbad);
    check(r == 0, "ibv_post_srq_recv of a list of 4", "returned %d", r);
    const int order[3] = {0, 1, 0};
    for (int m = 0; m < 3; ++m) {
      fill(b->local + 1024 * m, 500, 200 + m);
      struct ibv_sge ss = sge_of(b->local + 1024 * m, 500, b->lmr->lkey);
      struct ibv_send_wr sw = rdma_wr(IBV_WR_SEND, 10 + m, &ss, 1, 0, 0,
                                      IBV_SEND_SIGNALED);
      const int st = post_once(&p[order[m]].s[0], &sw, "SEND to an SRQ", NULL);
      struct ibv_wc wc;
      memset(&wc, 0, sizeof(wc));
      const int n = wait_wcs(p[order[m]].s[1].cq, &wc, 1, 10000);
      check(st == IBV_WC_SUCCESS && n == 1 && wc.status == IBV_WC_SUCCESS &&
                wc.wr_id == (uint64_t)(100 + m) && wc.byte_len == 500 &&
                wc.qp_num == p[order[m]].s[1].qp->qp_num &&
                first_diff(b->local + 1024 * m, b->remote + 1024 * m, 500) ==
                    500,
            "each message takes the shared queue's next receive, on the "
            "queue pair it came to",
            "message %d: %s, %d completions, wr_id %llu, len %u", m,
            wc_name(st), n, (unsigned long long)wc.wr_id, wc.byte_len);
    }
    /* One receive left: a limit of 2 is reached by the next message. */
    struct ibv_srq_attr lim;
    memset(&lim, 0, sizeof(lim));
    lim.srq_limit = 9;
    r = ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT);
    check(r == EINVAL, "an SRQ limit above max_wr is EINVAL", "returned %d",
          r);
    lim.srq_limit = 2;
    r = ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT);
    check(r == 0, "ibv_modify_srq arms the limit", "returned %d", r);
    struct ibv_sge ss = sge_of(b->local, 10, b->lmr->lkey);
    struct ibv_send_wr sw = rdma_wr(IBV_WR_SEND, 20, &ss, 1, 0, 0,
                                    IBV_SEND_SIGNALED);
    (void)post_once(&p[1].s[0], &sw, "SEND to an SRQ", NULL);
    struct ibv_wc wc;
    const int n = wait_wcs(p[1].s[1].cq, &wc, 1, 10000);
    check(n == 1 && wc.wr_id == 103 &&
              take_async(d->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq),
          "IBV_EVENT_SRQ_LIMIT_REACHED once fewer receives than the limit "
          "are left", "%d completions, wr_id %llu", n,
          (unsigned long long)wc.wr_id);
    r = ibv_query_srq(srq, &qa);
    check(r == 0 && qa.srq_limit == 0, "the limit is disarmed by its event",
          "limit %u", qa.srq_limit);
    r = to_state(p[0].s[1].qp, IBV_QPS_ERR);
    check(r == 0 && take_async(d->ctx, IBV_EVENT_QP_LAST_WQE_REACHED,
                               p[0].s[1].qp),
          "IBV_EVENT_QP_LAST_WQE_REACHED when a queue pair with a shared "
          "receive queue enters ERR", "modify returned %d", r);
  }
  free_pair(&p[0]);
  free_pair(&p[1]);
  r = ibv_destroy_srq(srq);
  check(r == 0, "ibv_destroy_srq once no queue pair uses it", "returned %d",
        r);
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--port-down") == 0) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    return port_down_mode();
  }
  if (argc == 2 && strcmp(argv[1], "--port-events") == 0) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    return port_events_mode();
  }
  if (argc == 2 && strcmp(argv[1], "--device-fatal") == 0) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    return device_fatal_mode();
  }
  if (argc != 3) {
    fprintf(stderr, "usage: %s IP_OF_RDMAPLANE0 IP_OF_RDMAPLANE1\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  g_dev[0].ip = argv[1];
  g_dev[1].ip = argv[2];
  const double start = now_s();

  t_helpers();
  if (t_devices()) {
    t_lifecycle();
    t_state_machine();
    t_required_attributes();
    struct bufs b;
    if (make_bufs(&b)) {
      struct pair p;
      if (connect_pair(&p, &kDefaultOpts, &kDefaultOpts)) {
        t_write_read(&p, &b);
        t_unaligned(&p, &b);
        t_bad_wr_in_list(&p, &b);
      }
      free_pair(&p);
      t_unsignaled(&b);
      t_inline(&b);
      t_max_send_wr(&b);
      t_deep_queues(&b);
      t_deep_slots();
      t_receive_after_dereg(&b);
      t_lkey_of_another_pd(&b);
      t_two_contexts(&b);
      t_shared_cq(&b);
      t_remote_errors(&b);
      t_atomics(&b);
      t_memory_windows(&b);
      t_async_events(&b);
      t_access_in_passing(&b);
      t_comm_est(&b);
      t_loopback();
      t_local_errors(&b);
      t_peer_gone(&b);
      t_modify_to_err(&b);
      t_events(&b);
      t_send_sizes(&b);
      t_immediate(&b);
      t_inline_send(&b);
      t_rnr(&b);
      t_recv_too_small(&b);
      t_recv_queue(&b);
      t_resize_cq(&b);
      t_recv_events(&b);
      t_memory(&b);
      t_growing_registrations(&b);
      t_sysv_segments(&b);
      t_sysv_hugepages(&b);
      t_shared_files(&b);
      t_static_memory(&b);
      t_private_file_without_userfaultfd(&b);
      t_rereg(&b);
      t_uc(&b);
      t_ud(&b);
      t_srq(&b);
      t_extended(&b);
      t_extended_windows(&b);
      t_extended_ud(&b);
      free_bufs(&b);
      t_many_qps();
    }
    t_unsupported();
    t_man_page_refusals();
    for (int i = 0; i < 2; ++i) {
      step("close");
      int r = ibv_dealloc_pd(g_dev[i].pd);
      check(r == 0, "ibv_dealloc_pd once everything in it is gone",
            "returned %d", r);
      r = ibv_close_device(g_dev[i].ctx);
      check(r == 0, "ibv_close_device", "returned %d", r);
    }
  }
  alarm(0);
  printf("conformance: %d passed, %d failed in %.1f s\n", g_passed, g_failed,
         now_s() - start);
  return g_failed == 0 ? 0 : 1;
}
