#include "dataplane/rc/qp_state.h"

namespace rdmaplane::rc::lifecycle {
namespace {

// One mask per served type, named so that a table row reads as the spec does.
struct PerType {
  QpAttrMask rc = 0;
  QpAttrMask uc = 0;
  QpAttrMask ud = 0;

  constexpr QpAttrMask For(QpType type) const {
    switch (type) {
      case QpType::kRc:
        return rc;
      case QpType::kUc:
        return uc;
      case QpType::kUd:
        return ud;
    }
    return 0;
  }
};

constexpr PerType AllTypes(QpAttrMask mask) { return {mask, mask, mask}; }

// A Modify QP that exists: what it requires and what it may carry besides
// kQpAttrState. A transition missing from the table does not exist.
struct TransitionRule {
  QpState from;
  QpState to;
  PerType required;
  PerType optional;
};

// Attributes that several rows share.
constexpr QpAttrMask kConnectedInit =
    kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags;
constexpr QpAttrMask kDatagramInit =
    kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey;
constexpr QpAttrMask kUcRtr =
    kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn;
// RC adds the responder's resources: how many READs/atomics it serves at
// once and the RNR NAK timer it advertises.
constexpr QpAttrMask kRcRtr =
    kUcRtr | kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer;
// RC adds the requester's retry settings and READ/atomic depth.
constexpr QpAttrMask kRcRts = kQpAttrSqPsn | kQpAttrTimeout | kQpAttrRetryCnt |
                              kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic;
// What a queue pair that already sends may change in passing (RTR->RTS,
// RTS->RTS, SQD->RTS). Alternate-path attributes are IB-only and not served,
// but the kernel takes them here, so refusing them would refuse modifies
// that work elsewhere; the front end decides what to do with their values.
constexpr QpAttrMask kUcToRts =
    kQpAttrCurState | kQpAttrAccessFlags | kQpAttrAltPath | kQpAttrPathMigState;
constexpr QpAttrMask kRcToRts = kUcToRts | kQpAttrMinRnrTimer;
constexpr QpAttrMask kUdToRts = kQpAttrCurState | kQpAttrQkey;

// Every Modify QP that exists for RC, UC and UD (IBA vol. 1 §10.3.1 and
// §11.2.4.2; the sets follow the kernel's qp_state_table). Not listed, so
// refused: RESET->ERR (the kernel refuses it; a QP never initialized has
// nothing to flush), any move into SQE (only the transport enters it), and
// RTR->RTR and SQE->SQE (no attribute-only modify there). RATE_LIMIT and
// CAP appear nowhere: the kernel takes RATE_LIMIT only for raw packet QPs
// and resizes no queue through Modify QP.
constexpr TransitionRule kTransitions[] = {
    {QpState::kReset, QpState::kReset, {}, {}},
    {QpState::kReset,
     QpState::kInit,
     {.rc = kConnectedInit, .uc = kConnectedInit, .ud = kDatagramInit},
     {}},

    {QpState::kInit, QpState::kReset, {}, {}},
    {QpState::kInit, QpState::kErr, {}, {}},
    {QpState::kInit,
     QpState::kInit,
     {},
     {.rc = kConnectedInit, .uc = kConnectedInit, .ud = kDatagramInit}},
    // UD has no peer to name: it may enter RTR with no attributes at all.
    {QpState::kInit,
     QpState::kRtr,
     {.rc = kRcRtr, .uc = kUcRtr, .ud = 0},
     {.rc = kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex,
      .uc = kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex,
      .ud = kQpAttrPkeyIndex | kQpAttrQkey}},

    {QpState::kRtr, QpState::kReset, {}, {}},
    {QpState::kRtr, QpState::kErr, {}, {}},
    {QpState::kRtr,
     QpState::kRts,
     {.rc = kRcRts, .uc = kQpAttrSqPsn, .ud = kQpAttrSqPsn},
     {.rc = kRcToRts, .uc = kUcToRts, .ud = kUdToRts}},

    {QpState::kRts, QpState::kReset, {}, {}},
    {QpState::kRts, QpState::kErr, {}, {}},
    {QpState::kRts,
     QpState::kRts,
     {},
     {.rc = kRcToRts, .uc = kUcToRts, .ud = kUdToRts}},
    // The drained event is asked for here, and only here.
    {QpState::kRts, QpState::kSqd, {}, AllTypes(kQpAttrEnSqdAsyncNotify)},

    {QpState::kSqd, QpState::kReset, {}, {}},
    {QpState::kSqd, QpState::kErr, {}, {}},
    {QpState::kSqd,
     QpState::kRts,
     {},
     {.rc = kRcToRts, .uc = kUcToRts, .ud = kUdToRts}},
    // A drained send queue is the one moment to re-aim a connected QP (new
    // path, port, retry and READ settings) without losing its sequence.
    {QpState::kSqd,
     QpState::kSqd,
     {},
     {.rc = kQpAttrPort | kQpAttrAv | kQpAttrTimeout | kQpAttrRetryCnt |
            kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic | kQpAttrMaxDestRdAtomic |
            kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex |
            kQpAttrMinRnrTimer | kQpAttrPathMigState,
      .uc = kQpAttrAv | kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex |
            kQpAttrPathMigState,
      .ud = kQpAttrPkeyIndex | kQpAttrQkey}},

    // SQE exists for UC and UD only (StateExists); the application clears
    // the send queue error by moving back to RTS.
    {QpState::kSqe, QpState::kReset, {}, {}},
    {QpState::kSqe, QpState::kErr, {}, {}},
    {QpState::kSqe,
     QpState::kRts,
     {},
     {.rc = 0,
      .uc = kQpAttrCurState | kQpAttrAccessFlags,
      .ud = kQpAttrCurState | kQpAttrQkey}},

    // ERR -> ERR lets a caller move to ERR without first asking the state.
    {QpState::kErr, QpState::kReset, {}, {}},
    {QpState::kErr, QpState::kErr, {}, {}},
};

constexpr bool IsQpState(QpState state) {
  return static_cast<int>(state) < kQpStateCount;
}
constexpr bool IsQpType(QpType type) {
  return static_cast<int>(type) < kQpTypeCount;
}

// An RC error that a UC or UD QP would survive in SQE ends the whole RC
// connection (IBA §10.3.1, SQEr state), so an RC QP is never in SQE.
constexpr bool StateExists(QpType type, QpState state) {
  return IsQpState(state) && !(type == QpType::kRc && state == QpState::kSqe);
}

constexpr const TransitionRule* FindRule(QpState from, QpState to) {
  for (const TransitionRule& rule : kTransitions) {
    if (rule.from == from && rule.to == to) return &rule;
  }
  return nullptr;
}

}  // namespace

QpAttrMask RequiredQpAttrs(QpType type, QpState current, QpState next) {
  if (!IsQpType(type) || !StateExists(type, current) ||
      !StateExists(type, next)) {
    return 0;
  }
  const TransitionRule* rule = FindRule(current, next);
  return rule == nullptr ? 0 : rule->required.For(type);
}

const char* QpStateName(QpState state) {
  switch (state) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kErr:
      return "ERR";
  }
  return "UNKNOWN";
}

const char* QpTypeName(QpType type) {
  switch (type) {
    case QpType::kRc:
      return "RC";
    case QpType::kUc:
      return "UC";
    case QpType::kUd:
      return "UD";
  }
  return "UNKNOWN";
}

const char* QpAttrName(QpAttrMask bit) {
  switch (bit) {
    case kQpAttrState:
      return "STATE";
    case kQpAttrCurState:
      return "CUR_STATE";
    case kQpAttrEnSqdAsyncNotify:
      return "EN_SQD_ASYNC_NOTIFY";
    case kQpAttrAccessFlags:
      return "ACCESS_FLAGS";
    case kQpAttrPkeyIndex:
      return "PKEY_INDEX";
    case kQpAttrPort:
      return "PORT";
    case kQpAttrQkey:
      return "QKEY";
    case kQpAttrAv:
      return "AV";
    case kQpAttrPathMtu:
      return "PATH_MTU";
    case kQpAttrTimeout:
      return "TIMEOUT";
    case kQpAttrRetryCnt:
      return "RETRY_CNT";
    case kQpAttrRnrRetry:
      return "RNR_RETRY";
    case kQpAttrRqPsn:
      return "RQ_PSN";
    case kQpAttrMaxQpRdAtomic:
      return "MAX_QP_RD_ATOMIC";
    case kQpAttrAltPath:
      return "ALT_PATH";
    case kQpAttrMinRnrTimer:
      return "MIN_RNR_TIMER";
    case kQpAttrSqPsn:
      return "SQ_PSN";
    case kQpAttrMaxDestRdAtomic:
      return "MAX_DEST_RD_ATOMIC";
    case kQpAttrPathMigState:
      return "PATH_MIG_STATE";
    case kQpAttrCap:
      return "CAP";
    case kQpAttrDestQpn:
      return "DEST_QPN";
    case kQpAttrRateLimit:
      return "RATE_LIMIT";
  }
  return "UNKNOWN";
}

QpTransitionCheck CheckQpTransition(QpType type, QpState current, QpState next,
                                    QpAttrMask mask) {
  QpTransitionCheck check;
  // Without STATE, attr->qp_state is not meant to be read: the modify
  // keeps the state (the kernel's uverbs layer reads it the same way).
  check.next = (mask & kQpAttrState) != 0 ? next : current;
  if (!IsQpType(type) || !StateExists(type, current) ||
      !StateExists(type, check.next)) {
    return check;
  }
  const TransitionRule* rule = FindRule(current, check.next);
  if (rule == nullptr) return check;
  check.transition_exists = true;
  const QpAttrMask required = rule->required.For(type);
  const QpAttrMask optional = rule->optional.For(type);
  check.missing = required & ~mask;
  check.not_allowed = mask & ~(required | optional | kQpAttrState);
  check.ok = check.missing == 0 && check.not_allowed == 0;
  return check;
}

QpTransitionCheck QpLifecycle::Modify(QpState next, QpAttrMask mask) {
  QpTransitionCheck check = CheckQpTransition(type_, state_, next, mask);
  if (!check.ok) return check;
  if (requester_ == RequesterState::kDraining && check.next != QpState::kErr &&
      check.next != QpState::kReset) {
    check.ok = false;
    check.refused_while_draining = true;
    return check;
  }
  EnterState(check.next);
  return check;
}

void QpLifecycle::EnterState(QpState next) {
  const QpState previous = state_;
  state_ = next;
  switch (next) {
    case QpState::kReset:
      // Everything the queue pair knew is gone; it is as created.
      requester_ = RequesterState::kIdle;
      responder_ = ResponderState::kIdle;
      completer_ = CompleterState::kIdle;
      break;
    case QpState::kInit:
      // RESET->INIT or INIT->INIT: nothing runs yet.
      break;
    case QpState::kRtr:
      responder_ = ResponderState::kReceiving;
      break;
    case QpState::kRts:
      requester_ = RequesterState::kSending;
      responder_ = ResponderState::kReceiving;
      // Leaving SQE, the flushed send queue starts over with nothing owed.
      if (previous == QpState::kSqe) completer_ = CompleterState::kIdle;
      break;
    case QpState::kSqd:
      // SQD->SQD changes attributes of a drained queue: it stays drained.
      if (previous == QpState::kRts) requester_ = RequesterState::kDraining;
      break;
    case QpState::kSqe:
      requester_ = RequesterState::kError;
      completer_ = CompleterState::kError;
      break;
    case QpState::kErr:
      requester_ = RequesterState::kError;
      responder_ = ResponderState::kError;
      completer_ = CompleterState::kError;
      break;
  }
}

bool QpLifecycle::OnFatalError() {
  if (state_ == QpState::kErr) return false;
  EnterState(QpState::kErr);
  return true;
}

bool QpLifecycle::OnSendQueueError() {
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return false;
  EnterState(type_ == QpType::kRc ? QpState::kErr : QpState::kSqe);
  return true;
}

bool QpLifecycle::OnDrained() {
  if (state_ != QpState::kSqd || requester_ != RequesterState::kDraining) {
    return false;
  }
  requester_ = RequesterState::kDrained;
  completer_ = CompleterState::kIdle;
  return true;
}

void QpLifecycle::OnRequestsInFlight() {
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return;
  if (completer_ == CompleterState::kIdle ||
      completer_ == CompleterState::kRetrying) {
    completer_ = CompleterState::kWaitingAck;
  }
}

void QpLifecycle::OnRetransmit() {
  if (completer_ == CompleterState::kWaitingAck) {
    completer_ = CompleterState::kRetrying;
  }
}

void QpLifecycle::OnAllAcknowledged() {
  if (completer_ == CompleterState::kWaitingAck ||
      completer_ == CompleterState::kRetrying) {
    completer_ = CompleterState::kIdle;
  }
}

bool QpLifecycle::CanPostSend() const {
  switch (state_) {
    case QpState::kRts:
    case QpState::kSqd:
    case QpState::kSqe:
    case QpState::kErr:
      return true;
    case QpState::kReset:
    case QpState::kInit:
    case QpState::kRtr:
      return false;
  }
  return false;
}

bool QpLifecycle::CanPostRecv() const { return state_ != QpState::kReset; }

}  // namespace rdmaplane::rc::lifecycle
