// A seeded model of an unreliable link: decides for each frame whether it is
// lost, duplicated or reordered, and how long it is delayed. Used by the
// simulated link in tests and by the fault-injecting port wrapper, since this
// kernel has no netem.
//
// Thread-compatible: one instance per direction, used by one thread.
#ifndef RDMAPLANE_DATAPLANE_FAULT_FAULT_MODEL_H_
#define RDMAPLANE_DATAPLANE_FAULT_FAULT_MODEL_H_

#include <cstdint>
#include <random>
#include <string>

namespace rdmaplane::fault {

struct FaultSpec {
  double loss = 0;       // probability a frame is dropped
  double duplicate = 0;  // probability a delivered frame arrives twice
  double reorder = 0;    // probability a frame is held back by reorder_ns
  uint64_t delay_ns = 0;    // fixed one-way delay
  uint64_t jitter_ns = 0;   // uniform extra delay in [0, jitter_ns]
  uint64_t reorder_ns = 0;  // extra delay of a reordered frame
  uint64_t drop_after = 0;  // if set, every frame after the first N is lost
  uint64_t seed = 1;

  bool active() const {
    return loss > 0 || duplicate > 0 || reorder > 0 || delay_ns > 0 ||
           jitter_ns > 0 || drop_after > 0;
  }
};

// Parses "loss=0.01,dup=0.001,reorder=0.01,delay_us=5,jitter_us=1,
// reorder_us=20,drop_after=100,seed=7" (any subset, any order). Returns an empty string on
// success, else what is wrong.
std::string ParseFaultSpec(const std::string& text, FaultSpec* spec);

// What happens to one frame. A link keeps frames in order except those
// marked reordered, which overtake nothing and are overtaken by later ones.
struct FaultDecision {
  uint32_t copies = 1;     // 0: dropped; 2: duplicated
  uint64_t delay_ns = 0;   // delay of the first copy
  uint64_t delay2_ns = 0;  // delay of the second copy
  bool reordered = false;
  bool reordered2 = false;
};

struct FaultCounters {
  uint64_t frames = 0;
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
};

// When a delayed frame is due. Jitter varies the delay but, as on a real
// link, never the order: frames not marked reordered leave no earlier than
// the one before them.
class DeliveryOrder {
 public:
  uint64_t Due(uint64_t sent_ns, uint64_t delay_ns, bool reordered) {
    uint64_t due = sent_ns + delay_ns;
    if (!reordered) {
      if (due < last_due_ns_) due = last_due_ns_;
      last_due_ns_ = due;
    }
    return due;
  }

 private:
  uint64_t last_due_ns_ = 0;
};

class FaultModel {
 public:
  explicit FaultModel(const FaultSpec& spec);
  FaultDecision Next();
  const FaultCounters& counters() const { return counters_; }
  const FaultSpec& spec() const { return spec_; }

 private:
  uint64_t Delay(bool* reordered);

  FaultSpec spec_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  FaultCounters counters_;
};

}  // namespace rdmaplane::fault

#endif  // RDMAPLANE_DATAPLANE_FAULT_FAULT_MODEL_H_
