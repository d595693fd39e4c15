/* A UCX client and server that connect by socket address, through UCX's
 * connection manager (ucp_listener_create, ucp_ep_create with
 * UCP_EP_PARAM_FIELD_SOCK_ADDR): with UCX_SOCKADDR_TLS_PRIORITY=rdmacm that
 * is its rdmacm component, over librdmacm. The client sends ROUNDS tagged
 * messages of SIZE bytes, each filled from its round number; the server
 * checks every byte and sends each back with every byte incremented, which
 * the client checks in turn. Prints "ucp_sockaddr: ok" at the end.
 *
 *   ucp_sockaddr server PORT [SIZE ROUNDS]
 *   ucp_sockaddr client ADDRESS PORT [SIZE ROUNDS]
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

static ucp_worker_h worker;
static ucp_conn_request_h pending_request;

static void die(const char* what, ucs_status_t status) {
  fprintf(stderr, "ucp_sockaddr: %s: %s\n", what, ucs_status_string(status));
  exit(1);
}

static void on_conn_request(ucp_conn_request_h request, void* arg) {
  (void)arg;
  pending_request = request;
}

static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)arg;
  (void)ep;
  fprintf(stderr, "ucp_sockaddr: endpoint error: %s\n",
          ucs_status_string(status));
}

/* Waits for a request of the nonblocking API to finish. */
static void wait_request(void* request, const char* what) {
  if (request == NULL) return;
  if (UCS_PTR_IS_ERR(request)) die(what, UCS_PTR_STATUS(request));
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    ucp_worker_progress(worker);
  }
  ucs_status_t status = ucp_request_check_status(request);
  ucp_request_free(request);
  if (status != UCS_OK) die(what, status);
}

static void send_buf(ucp_ep_h ep, void* buf, size_t size, ucp_tag_t tag) {
  ucp_request_param_t param = {0};
  wait_request(ucp_tag_send_nbx(ep, buf, size, tag, &param), "tag send");
}

static void recv_buf(void* buf, size_t size, ucp_tag_t tag) {
  ucp_request_param_t param = {0};
  wait_request(ucp_tag_recv_nbx(worker, buf, size, tag, (ucp_tag_t)-1, &param),
               "tag receive");
}

static void fill(uint8_t* buf, size_t size, unsigned seed) {
  for (size_t i = 0; i < size; ++i) buf[i] = (uint8_t)(seed * 131 + i * 7);
}

static void check(const uint8_t* buf, size_t size, unsigned seed, int plus,
                  const char* who) {
  for (size_t i = 0; i < size; ++i) {
    const uint8_t want = (uint8_t)(seed * 131 + i * 7 + plus);
    if (buf[i] != want) {
      fprintf(stderr, "ucp_sockaddr: %s: round %u byte %zu is %u, not %u\n",
              who, seed, i, buf[i], want);
      exit(1);
    }
  }
}

/* Closes after what was sent is delivered (flush mode); the peer may have
 * closed already, which is no error here. */
static void close_ep(ucp_ep_h ep) {
  ucp_request_param_t param = {0};
  void* request = ucp_ep_close_nbx(ep, &param);
  if (request != NULL && !UCS_PTR_IS_ERR(request)) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS) {
      ucp_worker_progress(worker);
    }
    ucp_request_free(request);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr,
            "usage: ucp_sockaddr server PORT [SIZE ROUNDS]\n"
            "       ucp_sockaddr client ADDRESS PORT [SIZE ROUNDS]\n");
    return 2;
  }
  const int server = strcmp(argv[1], "server") == 0;
  const int base = server ? 3 : 4;
  const size_t size = argc > base ? strtoul(argv[base], NULL, 0) : 65536;
  const unsigned rounds = argc > base + 1 ? strtoul(argv[base + 1], NULL, 0) : 20;
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(server ? argv[2] : argv[3]));
  if (!server && inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1) {
    fprintf(stderr, "ucp_sockaddr: bad address %s\n", argv[2]);
    return 2;
  }

  ucp_params_t params = {0};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context;
  ucs_status_t status = ucp_init(&params, NULL, &context);
  if (status != UCS_OK) die("ucp_init", status);
  ucp_worker_params_t wparams = {0};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context, &wparams, &worker);
  if (status != UCS_OK) die("ucp_worker_create", status);

  ucp_ep_params_t ep_params = {0};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER |
                         UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.err_handler.cb = on_ep_error;
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_listener_h listener = NULL;
  if (server) {
    ucp_listener_params_t lparams = {0};
    lparams.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                         UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lparams.sockaddr.addr = (const struct sockaddr*)&addr;
    lparams.sockaddr.addrlen = sizeof(addr);
    lparams.conn_handler.cb = on_conn_request;
    status = ucp_listener_create(worker, &lparams, &listener);
    if (status != UCS_OK) die("ucp_listener_create", status);
    printf("ucp_sockaddr: listening on port %s\n", argv[2]);
    fflush(stdout);
    while (pending_request == NULL) ucp_worker_progress(worker);
    ep_params.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep_params.conn_request = pending_request;
  } else {
    ep_params.field_mask |= UCP_EP_PARAM_FIELD_FLAGS |
                            UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.sockaddr.addr = (const struct sockaddr*)&addr;
    ep_params.sockaddr.addrlen = sizeof(addr);
  }
  ucp_ep_h ep;
  status = ucp_ep_create(worker, &ep_params, &ep);
  if (status != UCS_OK) die("ucp_ep_create", status);

  uint8_t* buf = malloc(size);
  for (unsigned r = 0; r < rounds; ++r) {
    if (server) {
      recv_buf(buf, size, r);
      check(buf, size, r, 0, "server");
      for (size_t i = 0; i < size; ++i) ++buf[i];
      send_buf(ep, buf, size, r);
    } else {
      fill(buf, size, r);
      send_buf(ep, buf, size, r);
      memset(buf, 0, size);
      recv_buf(buf, size, r);
      check(buf, size, r, 1, "client");
    }
  }
  /* The last words, so that neither end closes under the other's send:
   * the client says it is done, the server answers, and each closes only
   * after that (the server flushing its answer first). A send completes
   * once its buffer may be reused, not once the peer has it. */
  uint8_t done = 1;
  if (server) {
    recv_buf(&done, 1, 0xD0E);
    send_buf(ep, &done, 1, 0xD0F);
  } else {
    send_buf(ep, &done, 1, 0xD0E);
    recv_buf(&done, 1, 0xD0F);
  }
  printf("ucp_sockaddr: ok: %u rounds of %zu bytes each way, every byte checked\n",
         rounds, size);
  close_ep(ep);
  free(buf);
  if (listener != NULL) ucp_listener_destroy(listener);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return 0;
}
