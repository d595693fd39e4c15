#include "dataplane/rc/qp_state.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rdmaplane::rc::lifecycle {
namespace {

constexpr QpState kAllStates[] = {
    QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts,
    QpState::kSqd,   QpState::kSqe,  QpState::kErr};
constexpr QpType kAllTypes[] = {QpType::kRc, QpType::kUc, QpType::kUd};

// What the tests expect, written out by hand from the kernel's
// qp_state_table and IBA vol. 1 §10.3.1 for each type on its own, not read
// from the library's table: a legal Modify QP and its attribute sets
// (kQpAttrState aside).
struct Legal {
  QpState from;
  QpState to;
  QpAttrMask required;
  QpAttrMask optional;
};

// Every state may move to RESET and, once initialized, to ERR. RC has no
// SQE state.
void AddToResetAndErr(QpType type, std::vector<Legal>& legal) {
  legal.push_back({QpState::kReset, QpState::kReset, 0, 0});
  for (QpState from : {QpState::kInit, QpState::kRtr, QpState::kRts,
                       QpState::kSqd, QpState::kSqe, QpState::kErr}) {
    if (type == QpType::kRc && from == QpState::kSqe) continue;
    legal.push_back({from, QpState::kReset, 0, 0});
    legal.push_back({from, QpState::kErr, 0, 0});
  }
}

std::vector<Legal> ExpectedRc() {
  std::vector<Legal> legal = {
      {QpState::kReset, QpState::kInit,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags, 0},
      {QpState::kInit, QpState::kInit, 0,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags},
      {QpState::kInit, QpState::kRtr,
       kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn |
           kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer,
       kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex},
      {QpState::kRtr, QpState::kRts,
       kQpAttrSqPsn | kQpAttrTimeout | kQpAttrRetryCnt | kQpAttrRnrRetry |
           kQpAttrMaxQpRdAtomic,
       kQpAttrCurState | kQpAttrAltPath | kQpAttrAccessFlags |
           kQpAttrMinRnrTimer | kQpAttrPathMigState},
      {QpState::kRts, QpState::kRts, 0,
       kQpAttrCurState | kQpAttrAccessFlags | kQpAttrAltPath |
           kQpAttrPathMigState | kQpAttrMinRnrTimer},
      {QpState::kRts, QpState::kSqd, 0, kQpAttrEnSqdAsyncNotify},
      {QpState::kSqd, QpState::kRts, 0,
       kQpAttrCurState | kQpAttrAltPath | kQpAttrAccessFlags |
           kQpAttrMinRnrTimer | kQpAttrPathMigState},
      {QpState::kSqd, QpState::kSqd, 0,
       kQpAttrPort | kQpAttrAv | kQpAttrTimeout | kQpAttrRetryCnt |
           kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic | kQpAttrMaxDestRdAtomic |
           kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex |
           kQpAttrMinRnrTimer | kQpAttrPathMigState},
  };
  AddToResetAndErr(QpType::kRc, legal);
  return legal;
}

std::vector<Legal> ExpectedUc() {
  std::vector<Legal> legal = {
      {QpState::kReset, QpState::kInit,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags, 0},
      {QpState::kInit, QpState::kInit, 0,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags},
      {QpState::kInit, QpState::kRtr,
       kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn,
       kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex},
      {QpState::kRtr, QpState::kRts, kQpAttrSqPsn,
       kQpAttrCurState | kQpAttrAltPath | kQpAttrAccessFlags |
           kQpAttrPathMigState},
      {QpState::kRts, QpState::kRts, 0,
       kQpAttrCurState | kQpAttrAccessFlags | kQpAttrAltPath |
           kQpAttrPathMigState},
      {QpState::kRts, QpState::kSqd, 0, kQpAttrEnSqdAsyncNotify},
      {QpState::kSqd, QpState::kRts, 0,
       kQpAttrCurState | kQpAttrAltPath | kQpAttrAccessFlags |
           kQpAttrPathMigState},
      {QpState::kSqd, QpState::kSqd, 0,
       kQpAttrAv | kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex |
           kQpAttrPathMigState},
      {QpState::kSqe, QpState::kRts, 0, kQpAttrCurState | kQpAttrAccessFlags},
  };
  AddToResetAndErr(QpType::kUc, legal);
  return legal;
}

std::vector<Legal> ExpectedUd() {
  std::vector<Legal> legal = {
      {QpState::kReset, QpState::kInit,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey, 0},
      {QpState::kInit, QpState::kInit, 0,
       kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey},
      {QpState::kInit, QpState::kRtr, 0, kQpAttrPkeyIndex | kQpAttrQkey},
      {QpState::kRtr, QpState::kRts, kQpAttrSqPsn,
       kQpAttrCurState | kQpAttrQkey},
      {QpState::kRts, QpState::kRts, 0, kQpAttrCurState | kQpAttrQkey},
      {QpState::kRts, QpState::kSqd, 0, kQpAttrEnSqdAsyncNotify},
      {QpState::kSqd, QpState::kRts, 0, kQpAttrCurState | kQpAttrQkey},
      {QpState::kSqd, QpState::kSqd, 0, kQpAttrPkeyIndex | kQpAttrQkey},
      {QpState::kSqe, QpState::kRts, 0, kQpAttrCurState | kQpAttrQkey},
  };
  AddToResetAndErr(QpType::kUd, legal);
  return legal;
}

std::vector<Legal> Expected(QpType type) {
  switch (type) {
    case QpType::kRc:
      return ExpectedRc();
    case QpType::kUc:
      return ExpectedUc();
    case QpType::kUd:
      return ExpectedUd();
  }
  return {};
}

// The expected row, or nullptr when the transition must not exist.
const Legal* FindExpected(const std::vector<Legal>& legal, QpState from,
                          QpState to) {
  const Legal* found = nullptr;
  for (const Legal& row : legal) {
    if (row.from != from || row.to != to) continue;
    EXPECT_EQ(found, nullptr) << "expectation listed twice";
    found = &row;
  }
  return found;
}

std::string Describe(QpType type, QpState from, QpState to) {
  return std::string(QpTypeName(type)) + " " + QpStateName(from) + "->" +
         QpStateName(to);
}

// The attribute bits of `mask`, one at a time.
std::vector<QpAttrMask> Bits(QpAttrMask mask) {
  std::vector<QpAttrMask> bits;
  for (int i = 0; i < 32; ++i) {
    if (mask & (1u << i)) bits.push_back(1u << i);
  }
  return bits;
}

TEST(QpStateTest, ValuesEqualLibibverbs) {
  // enum ibv_qp_state
  static_assert(static_cast<int>(QpState::kReset) == 0);
  static_assert(static_cast<int>(QpState::kInit) == 1);
  static_assert(static_cast<int>(QpState::kRtr) == 2);
  static_assert(static_cast<int>(QpState::kRts) == 3);
  static_assert(static_cast<int>(QpState::kSqd) == 4);
  static_assert(static_cast<int>(QpState::kSqe) == 5);
  static_assert(static_cast<int>(QpState::kErr) == 6);
  // enum ibv_qp_attr_mask, as in <infiniband/verbs.h>
  static_assert(kQpAttrState == 0x1);
  static_assert(kQpAttrCurState == 0x2);
  static_assert(kQpAttrEnSqdAsyncNotify == 0x4);
  static_assert(kQpAttrAccessFlags == 0x8);
  static_assert(kQpAttrPkeyIndex == 0x10);
  static_assert(kQpAttrPort == 0x20);
  static_assert(kQpAttrQkey == 0x40);
  static_assert(kQpAttrAv == 0x80);
  static_assert(kQpAttrPathMtu == 0x100);
  static_assert(kQpAttrTimeout == 0x200);
  static_assert(kQpAttrRetryCnt == 0x400);
  static_assert(kQpAttrRnrRetry == 0x800);
  static_assert(kQpAttrRqPsn == 0x1000);
  static_assert(kQpAttrMaxQpRdAtomic == 0x2000);
  static_assert(kQpAttrAltPath == 0x4000);
  static_assert(kQpAttrMinRnrTimer == 0x8000);
  static_assert(kQpAttrSqPsn == 0x10000);
  static_assert(kQpAttrMaxDestRdAtomic == 0x20000);
  static_assert(kQpAttrPathMigState == 0x40000);
  static_assert(kQpAttrCap == 0x80000);
  static_assert(kQpAttrDestQpn == 0x100000);
  static_assert(kQpAttrRateLimit == 0x2000000);
}

TEST(QpStateTest, Names) {
  EXPECT_STREQ(QpStateName(QpState::kReset), "RESET");
  EXPECT_STREQ(QpStateName(QpState::kRtr), "RTR");
  EXPECT_STREQ(QpStateName(QpState::kSqe), "SQE");
  EXPECT_STREQ(QpStateName(QpState::kErr), "ERR");
  EXPECT_STREQ(QpStateName(static_cast<QpState>(7)), "UNKNOWN");
  EXPECT_STREQ(QpTypeName(QpType::kUd), "UD");
  EXPECT_STREQ(QpAttrName(kQpAttrPkeyIndex), "PKEY_INDEX");
  EXPECT_STREQ(QpAttrName(kQpAttrRateLimit), "RATE_LIMIT");
  EXPECT_STREQ(QpAttrName(kQpAttrAv | kQpAttrPort), "UNKNOWN");
  EXPECT_STREQ(QpAttrName(1u << 30), "UNKNOWN");
}

// Every (type, from, to): legal exactly where the expectation lists it, and
// then with exactly its required attributes.
TEST(CheckQpTransitionTest, LegalExactlyWhereExpected) {
  int legal_count = 0;
  for (QpType type : kAllTypes) {
    const std::vector<Legal> legal = Expected(type);
    for (QpState from : kAllStates) {
      for (QpState to : kAllStates) {
        SCOPED_TRACE(Describe(type, from, to));
        const Legal* row = FindExpected(legal, from, to);
        if (row == nullptr) {
          for (QpAttrMask mask : {kQpAttrState, ~QpAttrMask{0}}) {
            const QpTransitionCheck check =
                CheckQpTransition(type, from, to, mask);
            EXPECT_FALSE(check.ok);
            EXPECT_FALSE(check.transition_exists);
            EXPECT_EQ(check.missing, 0u);
            EXPECT_EQ(check.not_allowed, 0u);
          }
          continue;
        }
        ++legal_count;
        const QpTransitionCheck check =
            CheckQpTransition(type, from, to, kQpAttrState | row->required);
        EXPECT_TRUE(check.ok);
        EXPECT_TRUE(check.transition_exists);
        EXPECT_FALSE(check.refused_while_draining);
        EXPECT_EQ(check.next, to);
        EXPECT_EQ(check.missing, 0u);
        EXPECT_EQ(check.not_allowed, 0u);
      }
    }
  }
  // RC: 8 rows of its own and 11 into RESET or ERR; UC and UD: 9 and 13.
  EXPECT_EQ(legal_count, 19 + 22 + 22);
}

TEST(CheckQpTransitionTest, EachMissingRequiredAttributeIsNamed) {
  for (QpType type : kAllTypes) {
    for (const Legal& row : Expected(type)) {
      SCOPED_TRACE(Describe(type, row.from, row.to));
      for (QpAttrMask bit : Bits(row.required)) {
        SCOPED_TRACE(QpAttrName(bit));
        const QpTransitionCheck check = CheckQpTransition(
            type, row.from, row.to, (kQpAttrState | row.required) & ~bit);
        EXPECT_FALSE(check.ok);
        EXPECT_TRUE(check.transition_exists);
        EXPECT_EQ(check.missing, bit);
        EXPECT_EQ(check.not_allowed, 0u);
      }
    }
  }
}

TEST(RequiredQpAttrsTest, EachRowsRequiredSetAndNothingElsewhere) {
  for (QpType type : kAllTypes) {
    const std::vector<Legal> legal = Expected(type);
    for (int from = 0; from < kQpStateCount; ++from) {
      for (int to = 0; to < kQpStateCount; ++to) {
        const auto f = static_cast<QpState>(from);
        const auto t = static_cast<QpState>(to);
        SCOPED_TRACE(Describe(type, f, t));
        const Legal* row = FindExpected(legal, f, t);
        EXPECT_EQ(RequiredQpAttrs(type, f, t),
                  row == nullptr ? 0u : row->required);
      }
    }
  }
  EXPECT_EQ(RequiredQpAttrs(static_cast<QpType>(9), QpState::kInit,
                            QpState::kRtr),
            0u);
}

TEST(CheckQpTransitionTest, OptionalAttributesAreTaken) {
  for (QpType type : kAllTypes) {
    for (const Legal& row : Expected(type)) {
      SCOPED_TRACE(Describe(type, row.from, row.to));
      const QpAttrMask base = kQpAttrState | row.required;
      for (QpAttrMask bit : Bits(row.optional)) {
        SCOPED_TRACE(QpAttrName(bit));
        EXPECT_TRUE(CheckQpTransition(type, row.from, row.to, base | bit).ok);
      }
      EXPECT_TRUE(
          CheckQpTransition(type, row.from, row.to, base | row.optional).ok);
    }
  }
}

// Every one of the 32 bits that is neither required, optional nor STATE,
// including bits libibverbs does not define, is refused by name.
TEST(CheckQpTransitionTest, EachAttributeOutsideTheRowIsNamed) {
  for (QpType type : kAllTypes) {
    for (const Legal& row : Expected(type)) {
      SCOPED_TRACE(Describe(type, row.from, row.to));
      const QpAttrMask taken = kQpAttrState | row.required | row.optional;
      for (QpAttrMask bit : Bits(~taken)) {
        SCOPED_TRACE(bit);
        const QpTransitionCheck check = CheckQpTransition(
            type, row.from, row.to, kQpAttrState | row.required | bit);
        EXPECT_FALSE(check.ok);
        EXPECT_TRUE(check.transition_exists);
        EXPECT_EQ(check.missing, 0u);
        EXPECT_EQ(check.not_allowed, bit);
      }
    }
  }
}

// ibv_modify_qp without IBV_QP_STATE changes attributes and keeps the state;
// attr->qp_state (`next` here) is then not read.
TEST(CheckQpTransitionTest, WithoutStateTheStateStays) {
  for (QpType type : kAllTypes) {
    const std::vector<Legal> legal = Expected(type);
    for (QpState current : kAllStates) {
      SCOPED_TRACE(Describe(type, current, current));
      const Legal* row = FindExpected(legal, current, current);
      const QpState ignored =
          current == QpState::kErr ? QpState::kRts : QpState::kErr;
      const QpTransitionCheck check = CheckQpTransition(
          type, current, ignored, row == nullptr ? 0 : row->optional);
      EXPECT_EQ(check.next, current);
      EXPECT_EQ(check.ok, row != nullptr);
      EXPECT_EQ(check.transition_exists, row != nullptr);
    }
  }
  // RTR has no attribute-only modify, even an empty one.
  EXPECT_FALSE(CheckQpTransition(QpType::kRc, QpState::kRtr, QpState::kRtr,
                                 kQpAttrMinRnrTimer)
                   .ok);
  EXPECT_FALSE(
      CheckQpTransition(QpType::kRc, QpState::kRtr, QpState::kRtr, 0).ok);
}

TEST(CheckQpTransitionTest, CurStateOnlyWhereListed) {
  const QpAttrMask rc_to_rts = kQpAttrState | kQpAttrSqPsn | kQpAttrTimeout |
                               kQpAttrRetryCnt | kQpAttrRnrRetry |
                               kQpAttrMaxQpRdAtomic;
  EXPECT_TRUE(CheckQpTransition(QpType::kRc, QpState::kRtr, QpState::kRts,
                                rc_to_rts | kQpAttrCurState)
                  .ok);
  EXPECT_TRUE(CheckQpTransition(QpType::kUd, QpState::kSqe, QpState::kRts,
                                kQpAttrState | kQpAttrCurState)
                  .ok);
  const QpTransitionCheck to_err =
      CheckQpTransition(QpType::kRc, QpState::kRts, QpState::kErr,
                        kQpAttrState | kQpAttrCurState);
  EXPECT_FALSE(to_err.ok);
  EXPECT_EQ(to_err.not_allowed, kQpAttrCurState);
  const QpTransitionCheck to_sqd =
      CheckQpTransition(QpType::kUc, QpState::kRts, QpState::kSqd,
                        kQpAttrState | kQpAttrCurState);
  EXPECT_FALSE(to_sqd.ok);
  EXPECT_EQ(to_sqd.not_allowed, kQpAttrCurState);
}

TEST(CheckQpTransitionTest, ValuesOutsideTheEnumsAreNeverLegal) {
  const QpState bad_state = static_cast<QpState>(7);
  EXPECT_FALSE(
      CheckQpTransition(QpType::kRc, bad_state, QpState::kReset, kQpAttrState)
          .ok);
  EXPECT_FALSE(
      CheckQpTransition(QpType::kRc, QpState::kRts, bad_state, kQpAttrState)
          .ok);
  EXPECT_FALSE(CheckQpTransition(static_cast<QpType>(3), QpState::kRts,
                                 QpState::kErr, kQpAttrState)
                   .ok);
}

// The modifies that bring a `type` queue pair from RESET to RTS with the
// attributes each one requires.
void BringUp(QpLifecycle& qp) {
  const std::vector<Legal> legal = Expected(qp.type());
  for (QpState to : {QpState::kInit, QpState::kRtr, QpState::kRts}) {
    const Legal* row = FindExpected(legal, qp.state(), to);
    ASSERT_NE(row, nullptr);
    ASSERT_TRUE(qp.Modify(to, kQpAttrState | row->required).ok)
        << Describe(qp.type(), qp.state(), to);
  }
}

TEST(QpLifecycleTest, BringUpMovesTheHalves) {
  for (QpType type : kAllTypes) {
    SCOPED_TRACE(QpTypeName(type));
    QpLifecycle qp(type);
    EXPECT_EQ(qp.state(), QpState::kReset);
    EXPECT_FALSE(qp.CanPostSend());
    EXPECT_FALSE(qp.CanPostRecv());
    EXPECT_EQ(qp.requester(), RequesterState::kIdle);
    EXPECT_EQ(qp.responder(), ResponderState::kIdle);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);

    const std::vector<Legal> legal = Expected(type);
    ASSERT_TRUE(qp.Modify(QpState::kInit,
                          kQpAttrState | FindExpected(legal, QpState::kReset,
                                                      QpState::kInit)
                                             ->required)
                    .ok);
    EXPECT_FALSE(qp.CanPostSend());
    EXPECT_TRUE(qp.CanPostRecv());
    EXPECT_EQ(qp.responder(), ResponderState::kIdle);

    ASSERT_TRUE(
        qp.Modify(
              QpState::kRtr,
              kQpAttrState |
                  FindExpected(legal, QpState::kInit, QpState::kRtr)->required)
            .ok);
    EXPECT_FALSE(qp.CanPostSend());
    EXPECT_TRUE(qp.CanPostRecv());
    EXPECT_EQ(qp.requester(), RequesterState::kIdle);
    EXPECT_EQ(qp.responder(), ResponderState::kReceiving);

    ASSERT_TRUE(
        qp.Modify(
              QpState::kRts,
              kQpAttrState |
                  FindExpected(legal, QpState::kRtr, QpState::kRts)->required)
            .ok);
    EXPECT_TRUE(qp.CanPostSend());
    EXPECT_TRUE(qp.CanPostRecv());
    EXPECT_FALSE(qp.ShouldFlush());
    EXPECT_FALSE(qp.ShouldFlushSends());
    EXPECT_EQ(qp.requester(), RequesterState::kSending);
    EXPECT_EQ(qp.responder(), ResponderState::kReceiving);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);
  }
}

TEST(QpLifecycleTest, RefusedModifyChangesNothing) {
  QpLifecycle qp(QpType::kRc);
  const QpTransitionCheck skip = qp.Modify(QpState::kRtr, kQpAttrState);
  EXPECT_FALSE(skip.ok);
  EXPECT_FALSE(skip.transition_exists);
  EXPECT_EQ(qp.state(), QpState::kReset);

  const QpTransitionCheck short_mask =
      qp.Modify(QpState::kInit, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort);
  EXPECT_FALSE(short_mask.ok);
  EXPECT_EQ(short_mask.missing, kQpAttrAccessFlags);
  EXPECT_EQ(qp.state(), QpState::kReset);

  // An attribute-only modify keeps the state, whatever `next` says.
  BringUp(qp);
  const QpTransitionCheck tweak = qp.Modify(QpState::kErr, kQpAttrMinRnrTimer);
  EXPECT_TRUE(tweak.ok);
  EXPECT_EQ(tweak.next, QpState::kRts);
  EXPECT_EQ(qp.state(), QpState::kRts);
}

// The kernel refuses RESET->ERR; a transport failure still reaches ERR.
TEST(QpLifecycleTest, ResetToErrIsAnEventNotAModify) {
  QpLifecycle qp(QpType::kRc);
  EXPECT_FALSE(qp.Modify(QpState::kErr, kQpAttrState).ok);
  EXPECT_EQ(qp.state(), QpState::kReset);
  EXPECT_TRUE(qp.OnFatalError());
  EXPECT_EQ(qp.state(), QpState::kErr);
}

TEST(QpLifecycleTest, FatalErrorFlushesAndResetMakesTheQueuePairReusable) {
  for (QpType type : kAllTypes) {
    SCOPED_TRACE(QpTypeName(type));
    QpLifecycle qp(type);
    BringUp(qp);
    qp.OnRequestsInFlight();
    EXPECT_TRUE(qp.OnFatalError());
    EXPECT_FALSE(qp.OnFatalError());  // reported once
    EXPECT_EQ(qp.state(), QpState::kErr);
    EXPECT_TRUE(qp.ShouldFlush());
    EXPECT_TRUE(qp.ShouldFlushSends());
    EXPECT_TRUE(qp.CanPostSend());  // accepted, then flushed
    EXPECT_TRUE(qp.CanPostRecv());
    EXPECT_EQ(qp.requester(), RequesterState::kError);
    EXPECT_EQ(qp.responder(), ResponderState::kError);
    EXPECT_EQ(qp.completer(), CompleterState::kError);

    // Transport events after the error change nothing.
    qp.OnRequestsInFlight();
    qp.OnAllAcknowledged();
    EXPECT_FALSE(qp.OnDrained());
    EXPECT_FALSE(qp.OnSendQueueError());
    EXPECT_EQ(qp.completer(), CompleterState::kError);

    EXPECT_TRUE(qp.Modify(QpState::kErr, kQpAttrState).ok);  // ERR->ERR
    EXPECT_FALSE(qp.Modify(QpState::kInit, kQpAttrState).ok);
    ASSERT_TRUE(qp.Modify(QpState::kReset, kQpAttrState).ok);
    EXPECT_EQ(qp.state(), QpState::kReset);
    EXPECT_FALSE(qp.CanPostSend());
    EXPECT_FALSE(qp.CanPostRecv());
    EXPECT_FALSE(qp.ShouldFlush());
    EXPECT_EQ(qp.requester(), RequesterState::kIdle);
    EXPECT_EQ(qp.responder(), ResponderState::kIdle);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);

    BringUp(qp);
    EXPECT_EQ(qp.state(), QpState::kRts);
    EXPECT_EQ(qp.requester(), RequesterState::kSending);
    EXPECT_EQ(qp.responder(), ResponderState::kReceiving);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);
    EXPECT_FALSE(qp.ShouldFlush());
  }
}

TEST(QpLifecycleTest, SendQueueErrorStopsOnlyTheSendQueueOfUcAndUd) {
  for (QpType type : {QpType::kUc, QpType::kUd}) {
    SCOPED_TRACE(QpTypeName(type));
    QpLifecycle qp(type);
    BringUp(qp);
    qp.OnRequestsInFlight();
    EXPECT_TRUE(qp.OnSendQueueError());
    EXPECT_FALSE(qp.OnSendQueueError());
    EXPECT_EQ(qp.state(), QpState::kSqe);
    EXPECT_TRUE(qp.ShouldFlushSends());
    EXPECT_FALSE(qp.ShouldFlush());
    EXPECT_TRUE(qp.CanPostSend());
    EXPECT_TRUE(qp.CanPostRecv());
    EXPECT_EQ(qp.requester(), RequesterState::kError);
    EXPECT_EQ(qp.completer(), CompleterState::kError);
    EXPECT_EQ(qp.responder(), ResponderState::kReceiving);

    ASSERT_TRUE(qp.Modify(QpState::kRts, kQpAttrState).ok);
    EXPECT_FALSE(qp.ShouldFlushSends());
    EXPECT_EQ(qp.requester(), RequesterState::kSending);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);
  }
}

TEST(QpLifecycleTest, SendQueueErrorEndsAnRcConnection) {
  QpLifecycle qp(QpType::kRc);
  EXPECT_FALSE(qp.OnSendQueueError());  // nothing is sent in RESET
  BringUp(qp);
  EXPECT_TRUE(qp.OnSendQueueError());
  EXPECT_EQ(qp.state(), QpState::kErr);
  EXPECT_TRUE(qp.ShouldFlush());
  EXPECT_EQ(qp.responder(), ResponderState::kError);
}

TEST(QpLifecycleTest, DrainIsReportedOnceAndHoldsModifiesUntilDone) {
  for (QpType type : kAllTypes) {
    SCOPED_TRACE(QpTypeName(type));
    QpLifecycle qp(type);
    BringUp(qp);
    EXPECT_FALSE(qp.OnDrained());  // no drain was asked for
    qp.OnRequestsInFlight();
    ASSERT_TRUE(
        qp.Modify(QpState::kSqd, kQpAttrState | kQpAttrEnSqdAsyncNotify).ok);
    EXPECT_EQ(qp.requester(), RequesterState::kDraining);
    EXPECT_EQ(qp.completer(), CompleterState::kWaitingAck);
    EXPECT_TRUE(qp.CanPostSend());  // queued until the return to RTS
    EXPECT_FALSE(qp.ShouldFlushSends());

    // Legal by the table, but not before the drain finishes.
    for (QpAttrMask mask : {QpAttrMask{kQpAttrState}, QpAttrMask{0}}) {
      const QpState next = mask == 0 ? QpState::kSqd : QpState::kRts;
      const QpTransitionCheck held = qp.Modify(next, mask);
      EXPECT_FALSE(held.ok);
      EXPECT_TRUE(held.transition_exists);
      EXPECT_TRUE(held.refused_while_draining);
      EXPECT_EQ(qp.state(), QpState::kSqd);
    }

    EXPECT_TRUE(qp.OnDrained());
    EXPECT_FALSE(qp.OnDrained());
    EXPECT_EQ(qp.requester(), RequesterState::kDrained);
    EXPECT_EQ(qp.completer(), CompleterState::kIdle);

    // Once drained, attributes change and the drain stays complete.
    const std::vector<Legal> legal = Expected(type);
    const Legal* sqd_sqd = FindExpected(legal, QpState::kSqd, QpState::kSqd);
    ASSERT_NE(sqd_sqd, nullptr);
    EXPECT_TRUE(qp.Modify(QpState::kSqd, sqd_sqd->optional).ok);
    EXPECT_EQ(qp.requester(), RequesterState::kDrained);
    ASSERT_TRUE(qp.Modify(QpState::kRts, kQpAttrState).ok);
    EXPECT_EQ(qp.requester(), RequesterState::kSending);
  }
}

TEST(QpLifecycleTest, ErrorOrResetEndsADrain) {
  QpLifecycle to_err(QpType::kRc);
  BringUp(to_err);
  ASSERT_TRUE(to_err.Modify(QpState::kSqd, kQpAttrState).ok);
  EXPECT_TRUE(to_err.Modify(QpState::kErr, kQpAttrState).ok);
  EXPECT_EQ(to_err.requester(), RequesterState::kError);

  QpLifecycle to_reset(QpType::kUd);
  BringUp(to_reset);
  ASSERT_TRUE(to_reset.Modify(QpState::kSqd, kQpAttrState).ok);
  EXPECT_TRUE(to_reset.Modify(QpState::kReset, kQpAttrState).ok);
  EXPECT_EQ(to_reset.requester(), RequesterState::kIdle);
}

TEST(QpLifecycleTest, CompleterFollowsAcknowledgements) {
  QpLifecycle qp(QpType::kRc);
  qp.OnRequestsInFlight();  // nothing can be sent before RTS
  EXPECT_EQ(qp.completer(), CompleterState::kIdle);
  BringUp(qp);
  qp.OnRetransmit();  // nothing to retransmit
  EXPECT_EQ(qp.completer(), CompleterState::kIdle);
  qp.OnRequestsInFlight();
  EXPECT_EQ(qp.completer(), CompleterState::kWaitingAck);
  qp.OnRetransmit();
  EXPECT_EQ(qp.completer(), CompleterState::kRetrying);
  qp.OnRequestsInFlight();  // resent
  EXPECT_EQ(qp.completer(), CompleterState::kWaitingAck);
  qp.OnRetransmit();
  qp.OnAllAcknowledged();
  EXPECT_EQ(qp.completer(), CompleterState::kIdle);
}

}  // namespace
}  // namespace rdmaplane::rc::lifecycle
