// The life of one queue pair as InfiniBand defines it: its states (IBA vol. 1
// §10.3.1 and the state diagram of §10.3), which attributes each Modify QP
// must carry and which it may carry (§11.2.4.2), and the coarse states of the
// queue pair's three halves (requester, responder, completer).
//
// The verbs front end, the native API and the connection manager all ask this
// module whether a modify is legal, so that they accept and refuse the same
// modifies; the table behind CheckQpTransition follows the Linux kernel's
// qp_state_table (ib_modify_qp_is_ok), which is what applications written
// against libibverbs have been tested against. The numeric values of QpState
// and of the QpAttrMask bits equal libibverbs' enum ibv_qp_state and enum
// ibv_qp_attr_mask, so a front end can cast; this header includes no verbs
// header, and the front end static_asserts the equality.
//
// Pure: no I/O, no allocation, no clock. The free functions are thread-safe
// (they only read constants). QpLifecycle is thread-compatible: its owner
// serializes every call (the verbs front end under the queue pair's lock, the
// engine on its own thread); concurrent const calls are safe.
//
// The names live in rdmaplane::rc::lifecycle because rdmaplane::rc::QpState
// (types.h) is still the RC transport's own two-state enum.
#ifndef RDMAPLANE_DATAPLANE_RC_QP_STATE_H_
#define RDMAPLANE_DATAPLANE_RC_QP_STATE_H_

#include <cstdint>

namespace rdmaplane::rc::lifecycle {

// Values equal enum ibv_qp_state (IBV_QPS_RESET = 0 ... IBV_QPS_ERR = 6).
enum class QpState : uint8_t {
  kReset = 0,
  kInit = 1,
  kRtr = 2,  // ready to receive
  kRts = 3,  // ready to send
  kSqd = 4,  // send queue drain
  kSqe = 5,  // send queue error (UC and UD only; an RC error is kErr)
  kErr = 6,
};
inline constexpr int kQpStateCount = 7;

// "RESET", "INIT", ...; "UNKNOWN" for a value outside the enum (a cast from
// an untrusted integer).
const char* QpStateName(QpState state);

// The transport services served. XRC is not (yet): it would add rows' masks,
// not rows.
enum class QpType : uint8_t { kRc, kUc, kUd };
inline constexpr int kQpTypeCount = 3;

const char* QpTypeName(QpType type);

// A set of queue-pair attributes, as in ibv_modify_qp's attr_mask. Each bit
// equals the enum ibv_qp_attr_mask constant of the same name.
using QpAttrMask = uint32_t;
inline constexpr QpAttrMask kQpAttrState = 1u << 0;
inline constexpr QpAttrMask kQpAttrCurState = 1u << 1;
inline constexpr QpAttrMask kQpAttrEnSqdAsyncNotify = 1u << 2;
inline constexpr QpAttrMask kQpAttrAccessFlags = 1u << 3;
inline constexpr QpAttrMask kQpAttrPkeyIndex = 1u << 4;
inline constexpr QpAttrMask kQpAttrPort = 1u << 5;
inline constexpr QpAttrMask kQpAttrQkey = 1u << 6;
inline constexpr QpAttrMask kQpAttrAv = 1u << 7;
inline constexpr QpAttrMask kQpAttrPathMtu = 1u << 8;
inline constexpr QpAttrMask kQpAttrTimeout = 1u << 9;
inline constexpr QpAttrMask kQpAttrRetryCnt = 1u << 10;
inline constexpr QpAttrMask kQpAttrRnrRetry = 1u << 11;
inline constexpr QpAttrMask kQpAttrRqPsn = 1u << 12;
inline constexpr QpAttrMask kQpAttrMaxQpRdAtomic = 1u << 13;
inline constexpr QpAttrMask kQpAttrAltPath = 1u << 14;
inline constexpr QpAttrMask kQpAttrMinRnrTimer = 1u << 15;
inline constexpr QpAttrMask kQpAttrSqPsn = 1u << 16;
inline constexpr QpAttrMask kQpAttrMaxDestRdAtomic = 1u << 17;
inline constexpr QpAttrMask kQpAttrPathMigState = 1u << 18;
inline constexpr QpAttrMask kQpAttrCap = 1u << 19;
inline constexpr QpAttrMask kQpAttrDestQpn = 1u << 20;
inline constexpr QpAttrMask kQpAttrRateLimit = 1u << 25;

// The name of one attribute bit without the IBV_QP_ prefix ("PKEY_INDEX");
// "UNKNOWN" for anything but exactly one bit named above.
const char* QpAttrName(QpAttrMask bit);

// What CheckQpTransition (or QpLifecycle::Modify) found.
struct QpTransitionCheck {
  // The modify is legal; all other fields say why not when it is not.
  bool ok = false;
  // The table has a row for (type, current, next). When false, no mask makes
  // the modify legal and `missing` / `not_allowed` are left empty.
  bool transition_exists = false;
  // QpLifecycle only: the send queue is still draining (SQD entered,
  // OnDrained not yet reported), and only a move to ERR or RESET is taken
  // then.
  bool refused_while_draining = false;
  // The state the modify leads to: `next`, or the current state when the
  // mask lacks kQpAttrState.
  QpState next = QpState::kReset;
  // Required attributes the mask lacks.
  QpAttrMask missing = 0;
  // Attributes the mask sets that this transition does not take.
  QpAttrMask not_allowed = 0;
};

// Whether a Modify QP of a `type` queue pair in `current` with attribute
// mask `mask` is legal, as ib_modify_qp_is_ok decides it:
//  - Without kQpAttrState in `mask` the modify changes attributes only and
//    `next` is ignored (libibverbs callers leave attr->qp_state unset then):
//    it is legal only where the table has a current -> current row (RESET,
//    INIT, RTS, SQD, ERR; not RTR or SQE).
//  - The row (current, next) must exist for `type`, every attribute it
//    requires for `type` must be in `mask`, and `mask` may set nothing
//    besides those, the row's optional attributes and kQpAttrState.
//  - kQpAttrCurState is one of the optional attributes, and only on the
//    rows that list it (RTR->RTS, RTS->RTS, SQD->RTS, SQE->RTS). Its value
//    (attr->cur_qp_state) is not seen here: the caller refuses a value that
//    differs from the state it passes as `current`.
//  - RC has no SQE state (an RC send error is fatal), so no RC transition
//    leaves or enters SQE.
// Values outside the enums (casts from untrusted integers) are never legal.
QpTransitionCheck CheckQpTransition(QpType type, QpState current, QpState next,
                                    QpAttrMask mask);

// The attributes the (type, current -> next) row requires, without
// kQpAttrState; 0 when there is no such row. For a caller that speaks of
// transitions rather than masks (the daemon's control protocol names a
// move, and the front end that sent it checked the application's mask).
QpAttrMask RequiredQpAttrs(QpType type, QpState current, QpState next);

// The requester (rxe_req.c's req.state): whether new send work requests
// start.
enum class RequesterState : uint8_t {
  kIdle,      // RESET, INIT, RTR: nothing is sent
  kSending,   // RTS: takes posted work requests and sends them
  kDraining,  // SQD: requests already started finish; none new start
  kDrained,   // SQD and nothing left in flight (IBV_EVENT_SQ_DRAINED)
  kError,     // SQE, ERR: send work requests complete flushed
};

// The responder (rxe_resp.c): whether the peer's requests are executed.
enum class ResponderState : uint8_t {
  kIdle,       // RESET, INIT: inbound requests are dropped
  kReceiving,  // RTR, RTS, SQD, SQE: executes inbound requests
  kError,      // ERR: inbound requests dropped, receives complete flushed
};

// The completer (rxe_comp.c): acknowledgements of what the requester sent.
// Congestion control and selective repeat will refine kWaitingAck and
// kRetrying; the lifecycle only needs to know whether anything is owed.
enum class CompleterState : uint8_t {
  kIdle,        // nothing sent is unacknowledged
  kWaitingAck,  // requests on the wire, awaiting ACKs or read responses
  kRetrying,    // a timeout or NAK rewound the requester; resend pending
  kError,       // what is left completes flushed
};

// One queue pair's state and the states of its three halves. Modify moves it
// as a verb asks; the On* events are what the transport reports. Moving to
// RESET clears everything, so ERR -> RESET -> INIT -> RTR -> RTS reuses the
// queue pair (IBA §10.3.1: Reset is the state a QP is created in).
//
// Thread-compatible: see the file comment.
class QpLifecycle {
 public:
  explicit QpLifecycle(QpType type) : type_(type) {}

  // Checks the modify (CheckQpTransition with the current state) and, when
  // legal, applies it. While the send queue drains (requester kDraining),
  // every modify but one to ERR or RESET is refused with
  // refused_while_draining: IBA §10.3.1 lets SQD attributes change only once
  // the drain is over (rxe_qp_chk_attr likewise refuses leaving SQD for
  // anything but ERR), and leaving for RTS early would let new requests
  // overtake the drain.
  QpTransitionCheck Modify(QpState next, QpAttrMask mask);

  // A fatal error (IBA §10.3.1 Error state; e.g. an RC retry exhausted, a
  // fatal NAK, a device failure): any state -> ERR. Returns true when the
  // state changed, i.e. when an IBV_EVENT_QP_FATAL-style event is due.
  bool OnFatalError();

  // A send work request completed in error. For UC and UD in RTS or SQD the
  // send queue stops and the queue pair enters SQE while its receive queue
  // keeps working (IBA §10.3.1 SQEr state); RC has no SQE and goes to ERR.
  // Ignored in any other state. Returns true when the state changed.
  bool OnSendQueueError();

  // The drain SQD began has finished: nothing is in flight. Moves the
  // requester kDraining -> kDrained and returns true (the moment to report
  // IBV_EVENT_SQ_DRAINED when the RTS->SQD modify set
  // kQpAttrEnSqdAsyncNotify); false, and no change, otherwise.
  bool OnDrained();

  // The requester put requests on the wire: the completer waits for their
  // acknowledgement (from kIdle or, after a resend, from kRetrying). Only in
  // RTS and SQD.
  void OnRequestsInFlight();
  // A timeout or NAK sequence error rewound the requester.
  void OnRetransmit();
  // Everything sent has been acknowledged.
  void OnAllAcknowledged();

  // Post Send is accepted (the request is queued, not refused at once) in
  // RTS, in SQD (queued requests wait for the return to RTS; IBA §10.3.1
  // SQD), and in SQE and ERR (they complete flushed: ShouldFlushSends). In
  // RESET, INIT and RTR it fails at once.
  bool CanPostSend() const;
  // Post Receive is accepted in every state but RESET; in ERR the receives
  // complete flushed (IBA §10.3.1).
  bool CanPostRecv() const;
  // ERR: both queues complete every work request with a flush error.
  bool ShouldFlush() const { return state_ == QpState::kErr; }
  // SQE or ERR: send work requests complete with a flush error.
  bool ShouldFlushSends() const {
    return state_ == QpState::kErr || state_ == QpState::kSqe;
  }

  QpType type() const { return type_; }
  QpState state() const { return state_; }
  RequesterState requester() const { return requester_; }
  ResponderState responder() const { return responder_; }
  CompleterState completer() const { return completer_; }

 private:
  void EnterState(QpState next);

  QpType type_;
  QpState state_ = QpState::kReset;
  RequesterState requester_ = RequesterState::kIdle;
  ResponderState responder_ = ResponderState::kIdle;
  CompleterState completer_ = CompleterState::kIdle;
};

}  // namespace rdmaplane::rc::lifecycle

#endif  // RDMAPLANE_DATAPLANE_RC_QP_STATE_H_
