#include "api/client.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "api/test_util.h"

namespace rdmaplane {
namespace {

using testing::ConnectedPair;
using testing::TestDaemon;

TEST(ClientTest, WriteAndReadBetweenTwoClients) {
  TestDaemon d("smoke");
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  ConnectedPair p(d);
  ASSERT_TRUE(p.ok);

  const uint32_t n = 1 << 20;
  auto* target = static_cast<uint8_t*>(p.server->Alloc(n));
  auto* source = static_cast<uint8_t*>(p.client->Alloc(n));
  auto* back = static_cast<uint8_t*>(p.client->Alloc(n));
  ASSERT_TRUE(target && source && back);
  for (uint32_t i = 0; i < n; ++i) source[i] = static_cast<uint8_t>(i * 7);
  std::memset(target, 0, n);

  uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t desc_len = sizeof(desc);
  ASSERT_EQ(p.server->RegisterRdmaMemory(p.server_conn, target, n,
                                         RDP_MEM_READWRITE, desc, &desc_len),
            RDP_OK);
  auto lkey = p.client->RegisterMemory(source, n, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok()) << lkey.status();
  auto lkey2 = p.client->RegisterMemory(back, n, RDP_MEM_WRITE);
  ASSERT_TRUE(lkey2.ok());

  rdp_sge sge{source, n, *lkey};
  rdp_overlapped ov{};
  ASSERT_EQ(p.client->Write(p.client_conn, &sge, 1, desc, desc_len, 0, 0, &ov),
            RDP_PENDING);
  uint32_t bytes = 0;
  ASSERT_EQ(p.client->GetOverlappedResult(p.client_conn, &ov, true, &bytes),
            RDP_OK);
  EXPECT_EQ(bytes, n);
  EXPECT_EQ(std::memcmp(source, target, n), 0);

  rdp_sge rsge{back, n, *lkey2};
  rdp_overlapped rov{};
  const auto* d_struct = reinterpret_cast<const shm::RdmaDescriptor*>(desc);
  ASSERT_EQ(p.client->Read(p.client_conn, &rsge, 1, d_struct->address, desc,
                           desc_len, 0, &rov),
            RDP_PENDING);
  ASSERT_EQ(p.client->GetOverlappedResult(p.client_conn, &rov, true, &bytes),
            RDP_OK);
  EXPECT_EQ(std::memcmp(source, back, n), 0);
}

}  // namespace
}  // namespace rdmaplane
