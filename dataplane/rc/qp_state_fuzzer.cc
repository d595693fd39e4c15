// Sequences of ibv_modify_qp calls and transport events through one queue
// pair's lifecycle (qp_state.h), the machine the verbs front end, the
// native API and the daemon all drive. The input picks the queue pair's
// type, then one step per byte group:
//   op % 8 == 0: Modify with a raw next state and a raw 32-bit mask;
//   op % 8 == 1: Modify to state (next % 7) with the row's required
//                attributes, and each attribute the row accepts when the
//                input's bit for it is set (so that long legal paths
//                happen: RESET->INIT->RTR->RTS->SQD->RTS...);
//   2 OnFatalError, 3 OnSendQueueError, 4 OnDrained, 5 OnRequestsInFlight,
//   6 OnRetransmit, 7 OnAllAcknowledged.
// After every step the lifecycle is checked against what qp_state.h and
// IBA 10.3.1 promise, independent of how the table is written:
//   - a refused modify changes nothing; an accepted one lands in the state
//     the mask names (or stays, without kQpAttrState), and is exactly what
//     CheckQpTransition accepts, save a drain in progress, when only ERR
//     and RESET are taken;
//   - an accepted mask holds every attribute RequiredQpAttrs names; a move
//     without a row names no attribute; values outside the enums are never
//     legal;
//   - from every state, STATE alone to RESET is legal, and to ERR from
//     every state but RESET;
//   - the requester, responder and completer agree with the state (RESET,
//     INIT and RTR send nothing; ERR has everything in error; SQE stops
//     the send side only; RC never enters SQE);
//   - CanPostSend, CanPostRecv, ShouldFlush and ShouldFlushSends follow
//     the state as the header says;
//   - the events move the state as documented and report whether they did.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dataplane/rc/qp_state.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::wire {

std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  // RC, UC and UD, each along its connection path with every optional
  // attribute (op 1, next, all bits), then drains, errors and a reuse.
  std::vector<std::vector<uint8_t>> seeds;
  for (uint8_t type = 0; type < 3; ++type) {
    std::vector<uint8_t> s = {type};
    for (uint8_t next : {1, 2, 3, 4, 3, 4}) {  // INIT RTR RTS SQD RTS SQD
      s.insert(s.end(), {1, next, 0xFF, 0xFF, 0xFF, 0xFF});
    }
    s.insert(s.end(), {5, 6, 4, 1, 3, 0, 0, 0, 0, 3, 2});  // drain, SQE, ERR
    s.insert(s.end(), {1, 0, 0, 0, 0, 0, 1, 1, 0xFF, 0xFF, 0xFF, 0xFF});
    seeds.push_back(s);
  }
  return seeds;
}

}  // namespace rdmaplane::wire

namespace {

using rdmaplane::rc::lifecycle::CheckQpTransition;
using rdmaplane::rc::lifecycle::CompleterState;
using rdmaplane::rc::lifecycle::kQpAttrState;
using rdmaplane::rc::lifecycle::QpAttrMask;
using rdmaplane::rc::lifecycle::QpLifecycle;
using rdmaplane::rc::lifecycle::QpState;
using rdmaplane::rc::lifecycle::QpType;
using rdmaplane::rc::lifecycle::RequesterState;
using rdmaplane::rc::lifecycle::RequiredQpAttrs;
using rdmaplane::rc::lifecycle::ResponderState;

constexpr QpState kStates[] = {QpState::kReset, QpState::kInit,
                               QpState::kRtr,   QpState::kRts,
                               QpState::kSqd,   QpState::kSqe,
                               QpState::kErr};

// The attribute bits ibv_modify_qp knows (IBV_QP_STATE ... IBV_QP_DEST_QPN,
// IBV_QP_RATE_LIMIT), without STATE.
constexpr QpAttrMask kKnownAttrs = ((1u << 21) - 1) & ~kQpAttrState;

struct Input {
  const uint8_t* p;
  size_t n;
  bool Empty() const { return n == 0; }
  uint8_t U8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{U8()} << (8 * i);
    return v;
  }
};

struct Snapshot {
  QpState state;
  RequesterState requester;
  ResponderState responder;
  CompleterState completer;
  bool operator==(const Snapshot& o) const {
    return state == o.state && requester == o.requester &&
           responder == o.responder && completer == o.completer;
  }
};

Snapshot Of(const QpLifecycle& q) {
  return {q.state(), q.requester(), q.responder(), q.completer()};
}

bool IsState(uint8_t raw) { return raw <= static_cast<uint8_t>(QpState::kErr); }

// What the state says of the three halves and the post verbs.
void CheckConsistent(const QpLifecycle& q) {
  const QpState s = q.state();
  switch (s) {
    case QpState::kReset:
    case QpState::kInit:
      FUZZ_CHECK(q.requester() == RequesterState::kIdle);
      FUZZ_CHECK(q.responder() == ResponderState::kIdle);
      FUZZ_CHECK(q.completer() == CompleterState::kIdle);
      break;
    case QpState::kRtr:
      FUZZ_CHECK(q.requester() == RequesterState::kIdle);
      FUZZ_CHECK(q.responder() == ResponderState::kReceiving);
      FUZZ_CHECK(q.completer() == CompleterState::kIdle);
      break;
    case QpState::kRts:
      FUZZ_CHECK(q.requester() == RequesterState::kSending);
      FUZZ_CHECK(q.responder() == ResponderState::kReceiving);
      FUZZ_CHECK(q.completer() != CompleterState::kError);
      break;
    case QpState::kSqd:
      FUZZ_CHECK(q.requester() == RequesterState::kDraining ||
                 q.requester() == RequesterState::kDrained);
      FUZZ_CHECK(q.responder() == ResponderState::kReceiving);
      FUZZ_CHECK(q.completer() != CompleterState::kError);
      break;
    case QpState::kSqe:
      FUZZ_CHECK(q.type() != QpType::kRc);
      FUZZ_CHECK(q.requester() == RequesterState::kError);
      FUZZ_CHECK(q.responder() == ResponderState::kReceiving);
      FUZZ_CHECK(q.completer() == CompleterState::kError);
      break;
    case QpState::kErr:
      FUZZ_CHECK(q.requester() == RequesterState::kError);
      FUZZ_CHECK(q.responder() == ResponderState::kError);
      FUZZ_CHECK(q.completer() == CompleterState::kError);
      break;
  }
  const bool sends = s == QpState::kRts || s == QpState::kSqd ||
                     s == QpState::kSqe || s == QpState::kErr;
  FUZZ_CHECK(q.CanPostSend() == sends);
  FUZZ_CHECK(q.CanPostRecv() == (s != QpState::kReset));
  FUZZ_CHECK(q.ShouldFlush() == (s == QpState::kErr));
  FUZZ_CHECK(q.ShouldFlushSends() ==
             (s == QpState::kErr || s == QpState::kSqe));
  // Any state may be moved to RESET, and any but RESET to ERR, with the
  // state alone (IBA 10.3.1; Linux's ib_modify_qp_is_ok has no RESET->ERR
  // row either).
  FUZZ_CHECK(CheckQpTransition(q.type(), s, QpState::kReset, kQpAttrState).ok);
  FUZZ_CHECK(CheckQpTransition(q.type(), s, QpState::kErr, kQpAttrState).ok ==
             (s != QpState::kReset));
}

// One Modify, checked.
void Modify(QpLifecycle& q, uint8_t raw_next, QpAttrMask mask) {
  const Snapshot before = Of(q);
  const auto next = static_cast<QpState>(raw_next);
  const auto table = CheckQpTransition(q.type(), before.state, next, mask);
  const auto got = q.Modify(next, mask);
  const bool draining = before.requester == RequesterState::kDraining;
  if (!got.ok) {
    FUZZ_CHECK(Of(q) == before);
    FUZZ_CHECK(table.ok == got.refused_while_draining);
    if (got.refused_while_draining) {
      FUZZ_CHECK(draining && got.next != QpState::kErr &&
                 got.next != QpState::kReset);
    }
  } else {
    FUZZ_CHECK(table.ok);
    FUZZ_CHECK(!draining || got.next == QpState::kErr ||
               got.next == QpState::kReset);
    FUZZ_CHECK(q.state() == got.next);
  }
  if (table.ok) {
    const QpState lands = (mask & kQpAttrState) ? next : before.state;
    FUZZ_CHECK(table.next == lands);
    FUZZ_CHECK(IsState(raw_next) || (mask & kQpAttrState) == 0);
    FUZZ_CHECK((RequiredQpAttrs(q.type(), before.state, lands) & ~mask) == 0);
    FUZZ_CHECK(table.missing == 0 && table.not_allowed == 0);
  } else {
    FUZZ_CHECK(table.missing != 0 || table.not_allowed != 0 ||
               !table.transition_exists);
  }
  if (!table.transition_exists) {
    FUZZ_CHECK(table.missing == 0 && table.not_allowed == 0);
  }
}

// A legal-looking Modify: the row's required attributes, plus those of
// `wanted` the row accepts one by one.
void ModifyWithRow(QpLifecycle& q, uint8_t raw_next, QpAttrMask wanted) {
  const QpState next = kStates[raw_next % 7];
  const QpState cur = q.state();
  QpAttrMask mask = kQpAttrState | RequiredQpAttrs(q.type(), cur, next);
  for (QpAttrMask bit = 1; bit != 0 && bit <= kKnownAttrs; bit <<= 1) {
    if ((wanted & bit) == 0 || (kKnownAttrs & bit) == 0) continue;
    if (CheckQpTransition(q.type(), cur, next, mask | bit).ok) mask |= bit;
  }
  Modify(q, static_cast<uint8_t>(next), mask);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  const QpType type = static_cast<QpType>(in.U8() % 3);
  QpLifecycle q(type);
  CheckConsistent(q);
  FUZZ_CHECK(q.state() == QpState::kReset);
  for (int steps = 0; !in.Empty() && steps < 256; ++steps) {
    const Snapshot before = Of(q);
    switch (in.U8() % 8) {
      case 0: {
        const uint8_t next = in.U8();
        Modify(q, next, in.U32());
        break;
      }
      case 1: {
        const uint8_t next = in.U8();
        ModifyWithRow(q, next, in.U32());
        break;
      }
      case 2: {
        const bool changed = q.OnFatalError();
        FUZZ_CHECK(q.state() == QpState::kErr);
        FUZZ_CHECK(changed == (before.state != QpState::kErr));
        break;
      }
      case 3: {
        const bool running =
            before.state == QpState::kRts || before.state == QpState::kSqd;
        FUZZ_CHECK(q.OnSendQueueError() == running);
        if (running) {
          FUZZ_CHECK(q.state() ==
                     (type == QpType::kRc ? QpState::kErr : QpState::kSqe));
        } else {
          FUZZ_CHECK(Of(q) == before);
        }
        break;
      }
      case 4: {
        const bool due = before.state == QpState::kSqd &&
                         before.requester == RequesterState::kDraining;
        FUZZ_CHECK(q.OnDrained() == due);
        if (due) {
          FUZZ_CHECK(q.requester() == RequesterState::kDrained);
        } else {
          FUZZ_CHECK(Of(q) == before);
        }
        break;
      }
      case 5:
        q.OnRequestsInFlight();
        FUZZ_CHECK(q.state() == before.state);
        if (before.state != QpState::kRts && before.state != QpState::kSqd) {
          FUZZ_CHECK(Of(q) == before);
        }
        break;
      case 6:
        q.OnRetransmit();
        FUZZ_CHECK(q.state() == before.state);
        break;
      case 7:
        q.OnAllAcknowledged();
        FUZZ_CHECK(q.state() == before.state);
        break;
    }
    CheckConsistent(q);
  }
  return 0;
}
