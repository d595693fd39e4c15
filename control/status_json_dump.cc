// Prints the sample status in every topic as "<topic>\t<json>" lines, after a
// "names\t<hex>,<hex>,..." line with the service names' bytes, for
// status_json_test.py to read back with an independent JSON parser.
#include <cstdio>
#include <string>

#include "control/status.h"
#include "control/status_sample.h"

int main() {
  using namespace rdmaplane::control;
  std::string names;
  for (const std::string& name : OddServiceNames()) {
    if (!names.empty()) names += ',';
    for (unsigned char c : name) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", c);
      names += hex;
    }
  }
  std::printf("names\t%s\n", names.c_str());
  const DaemonStatus status = SampleStatus();
  for (std::string_view topic : kStatusTopics) {
    std::printf("%.*s\t%s\n", static_cast<int>(topic.size()), topic.data(),
                RenderJson(status, topic).c_str());
  }
  return 0;
}
