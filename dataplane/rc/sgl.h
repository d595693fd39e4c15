// Copying between a work request's scatter/gather list and a contiguous
// buffer, starting at a byte offset into the list, and describing a range of
// the list in place (zero-copy transmit).
//
// Thread-compatible helpers; no allocation.
#ifndef RDMAPLANE_DATAPLANE_RC_SGL_H_
#define RDMAPLANE_DATAPLANE_RC_SGL_H_

#include <cstdint>
#include <cstring>

#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/types.h"

namespace rdmaplane::rc {

// Total bytes described by the SGL; UINT64 so that overflow is visible.
inline uint64_t SglLength(const WorkRequest& wr) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) total += wr.sge[i].length;
  return total;
}

// Calls fn(sge_address, bytes_done, n) for each piece of the `len` bytes that
// start `offset` bytes into the SGL.
template <typename Fn>
inline void ForEachSglPiece(const WorkRequest& wr, uint32_t offset,
                            uint32_t len, Fn fn) {
  uint32_t done = 0;
  for (uint32_t i = 0; i < wr.num_sge && done < len; ++i) {
    const Sge& sge = wr.sge[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const uint32_t avail = sge.length - offset;
    const uint32_t n = avail < len - done ? avail : len - done;
    fn(sge.addr + offset, done, n);
    done += n;
    offset = 0;
  }
}

// Copies `len` bytes starting `offset` bytes into the SGL to `dst`.
inline void CopyFromSgl(const WorkRequest& wr, uint32_t offset, uint8_t* dst,
                        uint32_t len) {
  ForEachSglPiece(wr, offset, len, [dst](uint8_t* at, uint32_t done, uint32_t n) {
    std::memcpy(dst + done, at, n);
  });
}

// Copies `len` bytes from `src` into the SGL starting `offset` bytes in.
inline void CopyToSgl(const WorkRequest& wr, uint32_t offset,
                      const uint8_t* src, uint32_t len) {
  ForEachSglPiece(wr, offset, len, [src](uint8_t* at, uint32_t done, uint32_t n) {
    std::memcpy(at, src + done, n);
  });
}

// Describes the `len` bytes that start `offset` bytes into the SGL as
// pieces in place, one per SGE they touch (at most kMaxSge, the size of
// `out`); returns how many.
inline uint32_t GatherFromSgl(const WorkRequest& wr, uint32_t offset,
                              uint32_t len, PayloadPiece* out) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < wr.num_sge && len > 0; ++i) {
    const Sge& sge = wr.sge[i];
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const uint32_t take = sge.length - offset < len ? sge.length - offset : len;
    out[n++] = {sge.addr + offset, take, sge.owner};
    len -= take;
    offset = 0;
  }
  return n;
}

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_SGL_H_
