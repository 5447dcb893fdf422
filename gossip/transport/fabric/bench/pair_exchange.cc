// PairExchange over one libfabric endpoint (design in pair_exchange.h).
#include "gossip/transport/fabric/bench/pair_exchange.h"

#include <rdma/fi_rma.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/page_bytes.h"
#include "gossip/collectives/collective_internal.h"
#include "gossip/transport/fabric/fabric_core.h"

namespace chorus::gossip {

namespace {

using fabric::FabricStatus;

constexpr uint64_t kHalfTag = 1, kSumTag = 2, kContactTag = 3;
constexpr const char* kBindAddress = "127.0.0.1";

class FabricPairExchange final : public PairExchange {
 public:
  FabricPairExchange(size_t bytes, int self) : self_(self), elems_(bytes / sizeof(float)), half_(elems_ / 2) {}

  // fabtests' steps: getinfo, fabric, domain, CQ, AV, endpoint, enable, then
  // the names and regions through `swap`, then first contact.
  Status Setup(FabricProvider provider, const Swap& swap) {
    CHORUS_ASSIGN_OR_RETURN(info_, fabric::GetInfo(provider, provider == FabricProvider::kShm ? "" : kBindAddress,
                                                   /*port=*/0, FI_RMA, FI_ORDER_SAW));
    CHORUS_ASSIGN_OR_RETURN(const fabric::FabricApi* fi, fabric::Libfabric());
    CHORUS_FI_RETURN_IF_ERROR(fi->fabric(info_->fabric_attr, fabric_.out(), nullptr), "fi_fabric");
    CHORUS_FI_RETURN_IF_ERROR(fi_domain(fabric_.get(), info_.get(), domain_.out(), nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    CHORUS_FI_RETURN_IF_ERROR(fi_cq_open(domain_.get(), &cq_attr, cq_.out(), nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    CHORUS_FI_RETURN_IF_ERROR(fi_av_open(domain_.get(), &av_attr, av_.out(), nullptr), "fi_av_open");
    CHORUS_FI_RETURN_IF_ERROR(fi_endpoint(domain_.get(), info_.get(), ep_.out(), nullptr), "fi_endpoint");
    CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &cq_.get()->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    CHORUS_FI_RETURN_IF_ERROR(fi_ep_bind(ep_.get(), &av_.get()->fid, 0), "fi_ep_bind(av)");
    CHORUS_FI_RETURN_IF_ERROR(fi_enable(ep_.get()), "fi_enable");

    uint8_t name[256];
    size_t len = sizeof(name);
    CHORUS_FI_RETURN_IF_ERROR(fi_getname(&ep_.get()->fid, name, &len), "fi_getname");
    CHORUS_ASSIGN_OR_RETURN(const std::vector<uint8_t> peer_name, swap(std::span<const uint8_t>(name, len)));
    CHORUS_FI_RETURN_IF_ERROR(fi_av_insert(av_.get(), peer_name.data(), 1, &peer_, 0, nullptr), "fi_av_insert");

    buf_.assign(elems_, 0.0f);
    scratch_.assign(2 * half_, 0.0f);  // [0, half): the peer's half; [half, 2 half): its sum
    CHORUS_RETURN_IF_ERROR(Register(buf_.data(), buf_.size() * sizeof(float), 1, buf_mr_));
    CHORUS_RETURN_IF_ERROR(Register(scratch_.data(), scratch_.size() * sizeof(float), 2, scratch_mr_));
    // Where the peer may write: the scratch's base (its virtual address, or 0
    // where the provider addresses by offset) and key.
    const bool virt = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    const uint64_t mine[2] = {virt ? reinterpret_cast<uint64_t>(scratch_.data()) : 0,
                              fi_mr_key(scratch_mr_.get())};
    CHORUS_ASSIGN_OR_RETURN(const std::vector<uint8_t> theirs,
                            swap(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine), sizeof(mine))));
    if (theirs.size() != sizeof(peer_scratch_)) {
      return DataLoss("the peer's scratch region is " + std::to_string(theirs.size()) + " bytes, not " +
                      std::to_string(sizeof(peer_scratch_)));
    }
    std::memcpy(peer_scratch_, theirs.data(), sizeof(peer_scratch_));
    return FirstContact();
  }

  Status Call(PairProtocol protocol, bool check) override {
    if (check) std::fill(buf_.begin(), buf_.end(), static_cast<float>(self_ + 1));
    const size_t keep = self_ == 0 ? 0 : half_, give = half_ - keep;  // element offsets
    CHORUS_RETURN_IF_ERROR(Exchange(protocol, kHalfTag, give, scratch_.data(), scratch_mr_.get(), 0));
    detail::AddInto(buf_.data() + keep, scratch_.data(), half_);
    CHORUS_RETURN_IF_ERROR(Exchange(protocol, kSumTag, keep, buf_.data() + give, buf_mr_.get(), half_));
    if (protocol == PairProtocol::kWrite) {
      std::memcpy(buf_.data() + give, scratch_.data() + half_, half_ * sizeof(float));
    }
    if (!check) return Status::Ok();
    for (size_t i = 0; i < elems_; ++i) {
      if (buf_[i] != 3.0f) {
        return DataLoss("pair exchange: element " + std::to_string(i) + " is " + std::to_string(buf_[i]) +
                        ", not 3");
      }
    }
    std::fill(buf_.begin(), buf_.end(), 0.0f);
    return Status::Ok();
  }

 private:
  // Sends half a buffer from element `from` of buf_ and takes the peer's half
  // of the same step: with kTagged into `into` (registered as `into_mr`),
  // with kWrite the peer writes it into this rank's scratch at element
  // `scratch_at`.
  Status Exchange(PairProtocol protocol, uint64_t tag, size_t from, float* into, fid_mr* into_mr,
                  size_t scratch_at) {
    const size_t bytes = half_ * sizeof(float);
    const int before = completed_;
    if (protocol == PairProtocol::kTagged) {
      CHORUS_RETURN_IF_ERROR(
          Post([&] { return fi_trecv(ep_.get(), into, bytes, Desc(into_mr), peer_, tag, 0, &ctx_[0]); }, "fi_trecv"));
      CHORUS_RETURN_IF_ERROR(Post(
          [&] { return fi_tsend(ep_.get(), buf_.data() + from, bytes, Desc(buf_mr_.get()), peer_, tag, &ctx_[1]); },
          "fi_tsend"));
    } else {
      const uint64_t remote = peer_scratch_[0] + scratch_at * sizeof(float);
      CHORUS_RETURN_IF_ERROR(Post(
          [&] { return fi_trecv(ep_.get(), &notice_in_, sizeof(notice_in_), nullptr, peer_, tag, 0, &ctx_[0]); },
          "fi_trecv"));
      CHORUS_RETURN_IF_ERROR(Post(
          [&] {
            return fi_write(ep_.get(), buf_.data() + from, bytes, Desc(buf_mr_.get()), peer_, remote,
                            peer_scratch_[1], &ctx_[1]);
          },
          "fi_write"));
      CHORUS_RETURN_IF_ERROR(Post(
          [&] { return fi_tinject(ep_.get(), &notice_out_, sizeof(notice_out_), peer_, tag); }, "fi_tinject"));
    }
    return AwaitCompletions(before, 2);
  }

  // Rank 0 sends first, and rank 1 only once that has arrived: libfabric
  // 1.17's net can lose a connection when both ends connect at once
  // (fabric_core.h, First contact).
  Status FirstContact() {
    const int before = completed_;
    if (self_ == 0) {
      CHORUS_RETURN_IF_ERROR(Post(
          [&] { return fi_tsend(ep_.get(), &notice_out_, sizeof(notice_out_), nullptr, peer_, kContactTag, &ctx_[0]); },
          "fi_tsend"));
    } else {
      CHORUS_RETURN_IF_ERROR(Post(
          [&] {
            return fi_trecv(ep_.get(), &notice_in_, sizeof(notice_in_), nullptr, peer_, kContactTag, 0, &ctx_[0]);
          },
          "fi_trecv"));
    }
    return AwaitCompletions(before, 1);
  }

  // Posts, driving the CQ while the provider says -FI_EAGAIN (connecting, or queue full).
  template <typename F>
  Status Post(F&& post, std::string_view call) {
    ssize_t ret;
    while ((ret = post()) == -FI_EAGAIN) CHORUS_RETURN_IF_ERROR(PollOnce());
    CHORUS_FI_RETURN_IF_ERROR(ret, call);
    return Status::Ok();
  }

  Status AwaitCompletions(int before, int count) {
    while (completed_ - before < count) CHORUS_RETURN_IF_ERROR(PollOnce());
    return Status::Ok();
  }

  Status PollOnce() {
    fi_cq_tagged_entry entries[8];
    const ssize_t n = fi_cq_read(cq_.get(), entries, 8);
    if (n == -FI_EAGAIN) return Status::Ok();
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq_.get(), &err, 0);
      return FabricStatus(-err.err, "pair exchange completion");
    }
    CHORUS_FI_RETURN_IF_ERROR(n, "fi_cq_read");
    completed_ += static_cast<int>(n);
    return Status::Ok();
  }

  // A buffer's descriptor where the provider asks for one (FI_MR_LOCAL).
  void* Desc(fid_mr* mr) const {
    return (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0 ? fi_mr_desc(mr) : nullptr;
  }

  Status Register(void* data, size_t bytes, uint64_t key, fabric::MrOwner& mr) {
    CHORUS_FI_RETURN_IF_ERROR(fi_mr_reg(domain_.get(), data, bytes,
                                        FI_SEND | FI_RECV | FI_WRITE | FI_READ | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                                        key, 0, mr.out(), nullptr),
                              "fi_mr_reg");
    return Status::Ok();
  }

  const int self_;
  const size_t elems_, half_;
  // Setup order; destruction closes the endpoint first (fabric_objects.h).
  fabric::InfoOwner info_;
  fabric::FabricOwner fabric_;
  fabric::DomainOwner domain_;
  fabric::CqOwner cq_;
  fabric::AvOwner av_;
  std::vector<float, PageAllocator<float>> buf_, scratch_;
  fabric::MrOwner buf_mr_, scratch_mr_;
  fabric::EpOwner ep_;
  fi_addr_t peer_ = FI_ADDR_UNSPEC;
  uint64_t peer_scratch_[2] = {};  // the peer's scratch: base, key
  uint64_t notice_in_ = 0, notice_out_ = 0;
  fi_context2 ctx_[2] = {};
  int completed_ = 0;
};

}  // namespace

Result<std::unique_ptr<PairExchange>> PairExchange::Open(FabricProvider provider, size_t bytes, int self,
                                                         const Swap& swap) {
  if (bytes < 8 || bytes % 8 != 0) {
    return Err(InvalidArgument("pair exchange of " + std::to_string(bytes) + " bytes: a multiple of 8 is needed"));
  }
  if (self != 0 && self != 1) return Err(InvalidArgument("pair exchange: rank " + std::to_string(self) + " of 2"));
  auto exchange = std::make_unique<FabricPairExchange>(bytes, self);
  Status status = exchange->Setup(provider, swap);
  if (!status.ok()) return Err(status.WithContext("pair exchange over " + std::string(ProviderName(provider))));
  return std::unique_ptr<PairExchange>(std::move(exchange));
}

}  // namespace chorus::gossip
