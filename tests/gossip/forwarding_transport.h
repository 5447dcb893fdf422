// Test helper: a Transport that passes every call on to another, for tests
// that watch or bend some calls (override those) over the in-process one.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "gossip/transport/transport.h"

namespace chorus::gossip::testing {

class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(Transport& inner) : inner_(inner) {}
  std::vector<uint8_t> LocalAddress() const override { return inner_.LocalAddress(); }
  Status SetPeers(Rank self, std::span<const PeerInfo> peers) override { return inner_.SetPeers(self, peers); }
  Rank rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Result<RequestPtr> Isend(Rank dest, Tag tag, std::span<const std::byte> data) override {
    return inner_.Isend(dest, tag, data);
  }
  Result<RequestPtr> Irecv(Rank source, Tag tag, std::span<std::byte> data) override {
    return inner_.Irecv(source, tag, data);
  }
  void MarkPeerDead(Rank peer) override { inner_.MarkPeerDead(peer); }
  bool PeerMarkedDead(Rank peer) const override { return inner_.PeerMarkedDead(peer); }
  void Discard(TagFilter filter) override { inner_.Discard(filter); }
  TransportStats Stats() const override { return inner_.Stats(); }
  std::string Describe() const override { return "forwarding over " + inner_.Describe(); }

 protected:
  Transport& inner() const { return inner_; }

 private:
  Transport& inner_;
};

}  // namespace chorus::gossip::testing
