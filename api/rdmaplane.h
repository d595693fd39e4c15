/* librdmaplane: the C interface of rdmaplane's client library.
 *
 * A client opens a session with the local rdmaplaned, allocates memory from
 * arenas it shares with the daemon, registers that memory, connects to a peer
 * by service name, and posts one-sided RDMA WRITEs and READs that complete
 * asynchronously. The semantics follow WSPRegisterRdmaMemory,
 * WSPDeregisterRdmaMemory, WSPRdmaWrite and NdkRead; docs/api.md explains
 * them and docs/seed-conformance.md maps each requirement to its test.
 *
 * Threading: an rdp_client is thread-compatible. Calls on one connection
 * (posting, polling, waiting) must come from one thread at a time; different
 * connections may be used from different threads. No call blocks except
 * rdp_accept with a timeout, rdp_get_overlapped_result with wait set, and the
 * calls that ask the daemon (open, alloc, registration, listen, connect,
 * disconnect, close), which wait for its answer at most the control time-out
 * (5 s); they sleep (futex) rather than spin, except that a wait for a
 * completion looks for it for up to 20 us first. Posting never allocates.
 */
#ifndef RDMAPLANE_API_RDMAPLANE_H_
#define RDMAPLANE_API_RDMAPLANE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Seed names in brackets. */
typedef enum rdp_status {
  RDP_OK = 0,
  RDP_PENDING = 1,            /* [WSA_IO_PENDING] completes later */
  RDP_ERR_INVALID = -1,       /* [WSAEINVAL] bad flags, unknown descriptor,
                                 registration in use */
  RDP_ERR_FAULT = -2,         /* [WSAEFAULT] buffer outside the caller's
                                 arenas, descriptor buffer too small, target
                                 outside the remote registration */
  RDP_ERR_NO_BUFFERS = -3,    /* [WSANOBUFS] out of memory or queue space */
  RDP_ERR_NOT_CONNECTED = -4, /* [WSAENOTCONN / STATUS_CONNECTION_INVALID] */
  RDP_ERR_CONN_RESET = -5,    /* [WSAECONNRESET] the peer closed */
  RDP_ERR_CONN_ABORTED = -6,  /* [WSAECONNABORTED] time-out or failure */
  RDP_ERR_ABORTED = -7,       /* [WSA_OPERATION_ABORTED] we closed with work
                                 outstanding */
  RDP_ERR_REMOTE_RESOURCES = -8, /* [STATUS_REMOTE_RESOURCES] read beyond the
                                    remote memory */
  RDP_ERR_NET_DOWN = -9,      /* [WSAENETDOWN] the daemon is unreachable */
  RDP_ERR_REFUSED = -10,      /* no listener for that service */
  RDP_ERR_PERMISSION = -11,   /* the daemon's policy refuses this user */
  RDP_ERR_TIMEOUT = -12,      /* a bounded wait ran out */
  RDP_ERR_AGAIN = -13,        /* nothing ready yet (e.g. no connection to
                                 accept) */
  RDP_ERR_LIMIT = -14         /* a limit the daemon enforces was reached:
                                 sessions, arenas or arena bytes per user or
                                 per session, connections per user or per
                                 daemon, its file descriptors;
                                 rdp_last_error() names it and the flag
                                 that sets it */
} rdp_status;

const char* rdp_status_name(int status);

/* Why the last call of this thread that talked to the daemon (rdp_open, the
 * registration calls, listen, accept, connect, disconnect, rdp_alloc) failed,
 * as the daemon or the library explained it, e.g. "uid 1000 holds 256
 * sessions of the 256 --max_sessions_per_user allows". "" when there is no
 * explanation. Valid until that thread's next such call fails. */
const char* rdp_last_error(void);

typedef struct rdp_client rdp_client;
/* A connection handle: its slot and a generation, never 0, never reused. */
typedef uint32_t rdp_conn;

/* Access flags for registrations [MEM_READ, MEM_WRITE, MEM_READWRITE]. */
#define RDP_MEM_READ 0x1u
#define RDP_MEM_WRITE 0x2u
#define RDP_MEM_READWRITE 0x3u

/* Work request flags [NDK_OP_FLAG_*], numbered as in ndkpi.h. */
#define RDP_FLAG_SILENT_SUCCESS 0x00000001u
#define RDP_FLAG_READ_FENCE 0x00000002u
#define RDP_FLAG_READ_LOCAL_INVALIDATE 0x00000100u
#define RDP_FLAG_DEFER 0x00000200u

/* Size of an RDMA buffer descriptor. */
#define RDP_DESCRIPTOR_BYTES 32u

/* Opens a session with the daemon at socket_path (NULL: the default path,
 * /run/rdmaplane/rdmaplane.sock for root, else $XDG_RUNTIME_DIR/
 * rdmaplane.sock, else /tmp/rdmaplane-<uid>.sock). */
int rdp_open(const char* socket_path, rdp_client** client);
/* Closes every connection and frees the client. When it returns, every
 * overlapped structure of every connection is final (see rdp_overlapped):
 * work that had not completed ends as RDP_ERR_ABORTED (or with the status of
 * an earlier break of its connection), and the daemon moves none of the
 * session's bytes any more. Registrations, listeners and arenas go with the
 * session. Bounded by the control time-out when the daemon does not
 * answer. */
void rdp_close(rdp_client* client);

/* Memory from the client's shared arenas; only this memory can be
 * registered. Returns NULL when out of memory. */
void* rdp_alloc(rdp_client* client, size_t bytes);
int rdp_free(rdp_client* client, void* ptr);

/* Local registration [WSPRegisterMemory]: makes [addr, addr + length) usable
 * as the source of writes (RDP_MEM_READ) and the target of reads
 * (RDP_MEM_WRITE). */
int rdp_register_memory(rdp_client* client, void* addr, uint64_t length,
                        uint32_t flags, uint32_t* lkey);
int rdp_deregister_memory(rdp_client* client, uint32_t lkey);

/* Connections by service name: rdp_listen, then rdp_accept on one side;
 * rdp_connect on the other. */
int rdp_listen(rdp_client* client, const char* service);
int rdp_accept(rdp_client* client, const char* service, int timeout_ms,
               rdp_conn* conn);
int rdp_connect(rdp_client* client, const char* service, rdp_conn* conn);
/* Connects to `service` at the daemon whose data port has IPv4 address
 * `peer` (dotted quad). RDP_ERR_REFUSED: nobody listens there on `service`;
 * RDP_ERR_TIMEOUT: no daemon answered at `peer`. */
int rdp_connect_to(rdp_client* client, const char* peer, const char* service,
                   rdp_conn* conn);
/* Ends the connection. When it returns -- once the daemon took the
 * connection back from its engine, normally within microseconds, at most
 * the control time-out (5 s) when the daemon does not answer -- every
 * overlapped structure of the connection is final: what had not completed
 * ends as RDP_ERR_ABORTED, or with the status of an earlier break (the
 * first reason wins); the peer's outstanding work ends RDP_ERR_CONN_RESET.
 * The handle never names a connection again (handles carry a generation).
 * RDP_ERR_NET_DOWN: the daemon did not answer (the connection is ended on
 * this side all the same). */
int rdp_disconnect(rdp_client* client, rdp_conn conn);

/* [WSPRegisterRdmaMemory] Registers [buffer, buffer + length) for access by
 * conn's peer. On entry *descriptor_length is the size of the descriptor
 * buffer; on return it is the size stored, or the size needed when the
 * buffer was too small (RDP_ERR_FAULT). A buffer outside the caller's arenas
 * gives RDP_ERR_FAULT and leaves *descriptor_length unchanged. */
int rdp_register_rdma_memory(rdp_client* client, rdp_conn conn, void* buffer,
                             uint32_t length, uint32_t flags, void* descriptor,
                             uint32_t* descriptor_length);
/* [WSPDeregisterRdmaMemory] */
int rdp_deregister_rdma_memory(rdp_client* client, rdp_conn conn,
                               const void* descriptor,
                               uint32_t descriptor_length);

typedef struct rdp_sge {
  void* addr;
  uint32_t length;
  uint32_t lkey;
} rdp_sge;

/* Overlapped result of one work request [WSAOVERLAPPED, NDK_RESULT]. Must
 * stay valid, and be used by one request only, until the request ends. It
 * ends exactly once (docs/api.md, "The life of an rdp_overlapped"):
 * - it completes: status and bytes are set by rdp_poll or
 *   rdp_get_overlapped_result;
 * - it succeeds with RDP_FLAG_SILENT_SUCCESS: never written again (status
 *   stays RDP_PENDING); it has ended once a later request of the
 *   connection completed, or the connection ended;
 * - the connection ends first: RDP_ERR_ABORTED when this client
 *   disconnected or closed (set before rdp_disconnect / rdp_close return),
 *   RDP_ERR_CONN_RESET when the peer disconnected, closed or exited,
 *   RDP_ERR_CONN_ABORTED when the connection failed or the daemon shut down
 *   or died (set at the next rdp_poll or rdp_get_overlapped_result). The
 *   first reason wins. A request posted after the peer's process died ends
 *   RDP_ERR_CONN_RESET, never RDP_OK. */
typedef struct rdp_overlapped {
  uint64_t context;        /* set by the caller, untouched by the library */
  volatile int32_t status; /* RDP_PENDING until completion */
  uint32_t bytes;          /* bytes transferred */
  uint32_t internal[4];
} rdp_overlapped;

/* [WSPRdmaWrite] Writes the SGL to the peer's buffer named by the
 * descriptor, at target_offset. Returns RDP_PENDING (completion later,
 * through ov) or an error. The SGL may live on the caller's stack. At most
 * 16 SGEs (more: RDP_ERR_INVALID); sgl and ov must not be NULL
 * (RDP_ERR_FAULT). A request refused here was not posted. */
int rdp_write(rdp_client* client, rdp_conn conn, const rdp_sge* sgl,
              uint32_t sge_count, const void* target_descriptor,
              uint32_t descriptor_length, uint32_t target_offset,
              uint32_t flags, rdp_overlapped* ov);

/* [NdkRead] Reads the peer's memory at remote_address (inside the region of
 * the remote token, which is the peer's descriptor) into the SGL. Returns
 * and checks its arguments as rdp_write does. */
int rdp_read(rdp_client* client, rdp_conn conn, const rdp_sge* sgl,
             uint32_t sge_count, uint64_t remote_address,
             const void* remote_token, uint32_t token_length, uint32_t flags,
             rdp_overlapped* ov);

/* Rings the doorbell for requests posted with RDP_FLAG_DEFER. */
int rdp_flush(rdp_client* client, rdp_conn conn);

/* Reaps up to max completions of conn without waiting; returns how many
 * (their overlapped structures are filled in and listed in done). Requests
 * ended by the end of the connection are listed too. */
int rdp_poll(rdp_client* client, rdp_conn conn, rdp_overlapped** done,
             int max);

/* [WSPGetOverlappedResult] The outcome of ov: RDP_PENDING if not complete
 * and wait is 0; with wait != 0 sleeps until it completes. On completion
 * returns its status and stores the byte count in *bytes. */
int rdp_get_overlapped_result(rdp_client* client, rdp_conn conn,
                              rdp_overlapped* ov, int wait, uint32_t* bytes);

#ifdef __cplusplus
}
#endif

#endif /* RDMAPLANE_API_RDMAPLANE_H_ */
