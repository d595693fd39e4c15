// Writing frames for independent decoders: a classic pcap file (Ethernet)
// and the JSON objects golden_check.py compares the decoders' fields with.
// Shared by the golden frames of the codecs (golden_frames_main.cc) and the
// capture of a queue-pair conversation (dataplane/rc/conversation_main.cc).
//
// Test-only. Thread-safe (pure functions, except WriteFile's I/O).
#ifndef RDMAPLANE_DATAPLANE_WIRE_GOLDEN_IO_H_
#define RDMAPLANE_DATAPLANE_WIRE_GOLDEN_IO_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dataplane/wire/golden_frames.h"

namespace rdmaplane::wire {

// A little-endian pcap 2.4 file, link type Ethernet, one record per frame
// 10 us apart.
std::vector<uint8_t> Pcap(const std::vector<std::vector<uint8_t>>& frames);

// The JSON object of a RoCE frame other than CM ("kind": "roce"; RC, UC or
// UD): every header field the frame was built from (or parsed into), null
// for the extension headers its opcode lacks, the payload as hex. `extra` is
// added verbatim before the closing brace (", \"key\": value" pairs).
std::string RoceJson(const GoldenFrame& g, const std::string& extra = "");

// "[\n" objects joined by ",\n" "\n]\n".
std::string JsonArray(const std::vector<std::string>& objects);

// Writes `data` to `path`; false (with a message on stderr) on failure.
bool WriteFile(const char* path, const void* data, size_t len);

// Lower-case hex, two digits a byte.
std::string Hex(std::span<const uint8_t> bytes);

std::string Ipv4String(uint32_t ip);
std::string MacString(const MacAddr& mac);

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_GOLDEN_IO_H_
