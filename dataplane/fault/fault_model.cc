#include "dataplane/fault/fault_model.h"

#include <cstdlib>

namespace rdmaplane::fault {
namespace {

bool ParseDouble(const std::string& s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

bool ParseU64(const std::string& s, uint64_t* out) {
  char* end = nullptr;
  if (s.empty() || s[0] == '-') return false;
  *out = std::strtoull(s.c_str(), &end, 10);
  return end == s.c_str() + s.size();
}

}  // namespace

std::string ParseFaultSpec(const std::string& text, FaultSpec* spec) {
  FaultSpec result;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return "expected key=value, got '" + item + "'";
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    double* prob = key == "loss"      ? &result.loss
                   : key == "dup"     ? &result.duplicate
                   : key == "reorder" ? &result.reorder
                                      : nullptr;
    if (prob != nullptr) {
      if (!ParseDouble(value, prob) || *prob < 0 || *prob > 1) {
        return key + " must be a probability in [0, 1], got '" + value + "'";
      }
      continue;
    }
    uint64_t* ns = key == "delay_us"     ? &result.delay_ns
                   : key == "jitter_us"  ? &result.jitter_ns
                   : key == "reorder_us" ? &result.reorder_ns
                                         : nullptr;
    uint64_t n = 0;
    if (ns != nullptr) {
      if (!ParseU64(value, &n) || n > 60'000'000) {
        return key + " must be 0..60000000, got '" + value + "'";
      }
      *ns = n * 1000;
      continue;
    }
    if (key == "drop_after") {
      if (!ParseU64(value, &n)) {
        return "drop_after must be an integer, got '" + value + "'";
      }
      result.drop_after = n;
      continue;
    }
    if (key == "seed") {
      if (!ParseU64(value, &n)) return "seed must be an integer, got '" + value + "'";
      result.seed = n;
      continue;
    }
    return "unknown fault key '" + key +
           "' (known: loss, dup, reorder, delay_us, jitter_us, reorder_us, "
           "drop_after, seed)";
  }
  *spec = result;
  return "";
}

FaultModel::FaultModel(const FaultSpec& spec) : spec_(spec), rng_(spec.seed) {}

uint64_t FaultModel::Delay(bool* reordered) {
  uint64_t d = spec_.delay_ns;
  if (spec_.jitter_ns > 0) {
    d += std::uniform_int_distribution<uint64_t>(0, spec_.jitter_ns)(rng_);
  }
  if (spec_.reorder > 0 && unit_(rng_) < spec_.reorder) {
    ++counters_.reordered;
    *reordered = true;
    d += spec_.reorder_ns;
  }
  return d;
}

FaultDecision FaultModel::Next() {
  ++counters_.frames;
  FaultDecision d;
  if ((spec_.drop_after > 0 && counters_.frames > spec_.drop_after) ||
      (spec_.loss > 0 && unit_(rng_) < spec_.loss)) {
    ++counters_.dropped;
    d.copies = 0;
    return d;
  }
  d.delay_ns = Delay(&d.reordered);
  if (spec_.duplicate > 0 && unit_(rng_) < spec_.duplicate) {
    ++counters_.duplicated;
    d.copies = 2;
    d.delay2_ns = Delay(&d.reordered2);
  }
  return d;
}

}  // namespace rdmaplane::fault
