// The C interface (rdmaplane.h) over rdmaplane::Client.
#include <memory>

#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/status.h"

struct rdp_client {
  std::unique_ptr<rdmaplane::Client> impl;
};

using rdmaplane::RdpCode;

extern "C" {

int rdp_open(const char* socket_path, rdp_client** client) {
  if (client == nullptr) return RDP_ERR_FAULT;
  rdmaplane::ClientOptions options;
  if (socket_path != nullptr) options.socket_path = socket_path;
  auto c = rdmaplane::Client::Open(options);
  if (!c.ok()) return RdpCode(c.status());
  *client = new rdp_client{std::move(*c)};
  return RDP_OK;
}

void rdp_close(rdp_client* client) { delete client; }

void* rdp_alloc(rdp_client* client, size_t bytes) {
  return client == nullptr ? nullptr : client->impl->Alloc(bytes);
}

int rdp_free(rdp_client* client, void* ptr) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return RdpCode(client->impl->Free(ptr));
}

int rdp_register_memory(rdp_client* client, void* addr, uint64_t length,
                        uint32_t flags, uint32_t* lkey) {
  if (client == nullptr || lkey == nullptr) return RDP_ERR_FAULT;
  auto key = client->impl->RegisterMemory(addr, length, flags);
  if (!key.ok()) return RdpCode(key.status());
  *lkey = *key;
  return RDP_OK;
}

int rdp_deregister_memory(rdp_client* client, uint32_t lkey) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return RdpCode(client->impl->DeregisterMemory(lkey));
}

int rdp_listen(rdp_client* client, const char* service) {
  if (client == nullptr || service == nullptr) return RDP_ERR_FAULT;
  return RdpCode(client->impl->Listen(service));
}

int rdp_accept(rdp_client* client, const char* service, int timeout_ms,
               rdp_conn* conn) {
  if (client == nullptr || service == nullptr || conn == nullptr) {
    return RDP_ERR_FAULT;
  }
  auto c = client->impl->Accept(service, timeout_ms < 0
                                             ? absl::InfiniteDuration()
                                             : absl::Milliseconds(timeout_ms));
  if (!c.ok()) return RdpCode(c.status());
  *conn = *c;
  return RDP_OK;
}

int rdp_connect(rdp_client* client, const char* service, rdp_conn* conn) {
  if (client == nullptr || service == nullptr || conn == nullptr) {
    return RDP_ERR_FAULT;
  }
  auto c = client->impl->Connect(service);
  if (!c.ok()) return RdpCode(c.status());
  *conn = *c;
  return RDP_OK;
}

int rdp_connect_to(rdp_client* client, const char* peer, const char* service,
                   rdp_conn* conn) {
  if (client == nullptr || peer == nullptr || service == nullptr ||
      conn == nullptr) {
    return RDP_ERR_FAULT;
  }
  auto c = client->impl->Connect(service, peer);
  if (!c.ok()) return RdpCode(c.status());
  *conn = *c;
  return RDP_OK;
}

int rdp_disconnect(rdp_client* client, rdp_conn conn) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return RdpCode(client->impl->Disconnect(conn));
}

int rdp_register_rdma_memory(rdp_client* client, rdp_conn conn, void* buffer,
                             uint32_t length, uint32_t flags, void* descriptor,
                             uint32_t* descriptor_length) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->RegisterRdmaMemory(conn, buffer, length, flags,
                                          descriptor, descriptor_length);
}

int rdp_deregister_rdma_memory(rdp_client* client, rdp_conn conn,
                               const void* descriptor,
                               uint32_t descriptor_length) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->DeregisterRdmaMemory(conn, descriptor,
                                            descriptor_length);
}

int rdp_write(rdp_client* client, rdp_conn conn, const rdp_sge* sgl,
              uint32_t sge_count, const void* target_descriptor,
              uint32_t descriptor_length, uint32_t target_offset,
              uint32_t flags, rdp_overlapped* ov) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->Write(conn, sgl, sge_count, target_descriptor,
                             descriptor_length, target_offset, flags, ov);
}

int rdp_read(rdp_client* client, rdp_conn conn, const rdp_sge* sgl,
             uint32_t sge_count, uint64_t remote_address,
             const void* remote_token, uint32_t token_length, uint32_t flags,
             rdp_overlapped* ov) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->Read(conn, sgl, sge_count, remote_address, remote_token,
                            token_length, flags, ov);
}

int rdp_flush(rdp_client* client, rdp_conn conn) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->Flush(conn);
}

int rdp_poll(rdp_client* client, rdp_conn conn, rdp_overlapped** done,
             int max) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->Poll(conn, done, max);
}

int rdp_get_overlapped_result(rdp_client* client, rdp_conn conn,
                              rdp_overlapped* ov, int wait, uint32_t* bytes) {
  if (client == nullptr) return RDP_ERR_FAULT;
  return client->impl->GetOverlappedResult(conn, ov, wait != 0, bytes);
}

}  // extern "C"
