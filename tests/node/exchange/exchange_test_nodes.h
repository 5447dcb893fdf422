// N nodes as threads over one LocalHub, each with its own trainer and the
// exchange a config names: the harness of the exchange tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gossip/transport/local/local_transport.h"
#include "node/exchange/exchange_factory.h"
#include "trainer/trainer.h"

namespace chorus::node {

// Every rank's trainer and exchange, built and driven on the rank's thread.
struct Node {
  std::unique_ptr<trainer::Trainer> trainer;
  ClusterSession session;
  std::unique_ptr<Exchange> exchange;
};

// `sites`: each rank's cluster.site (none where empty).
inline MembershipView View(int self, int n, const std::vector<int>& batches = {},
                           const std::vector<std::string>& sites = {}) {
  MembershipView view;
  view.self_rank = self;
  for (int r = 0; r < n; ++r) {
    Member m;
    m.rank = r;
    m.name = "node" + std::to_string(r);
    m.data_address = gossip::LocalHub::EncodeAddress(r);
    m.batch_size = batches.empty() ? 8 : batches[static_cast<size_t>(r)];
    m.host_group = m.name;
    if (!sites.empty()) m.site = sites[static_cast<size_t>(r)];
    view.members.push_back(std::move(m));
  }
  return view;
}

// Runs fn(rank, node) on n threads, each node with a fresh trainer of
// `model` (its options changed by `tune`, if given) and the exchange
// `config` names, in the view View(rank, n, batches, sites); returns each
// rank's status.
inline std::vector<Status> RunNodes(int n, const Config& config, trainer::ModelKind model,
                                    const std::function<Status(int, Node&)>& fn, const std::vector<int>& batches = {},
                                    const std::function<void(trainer::TrainerOptions&)>& tune = {},
                                    const std::vector<std::string>& sites = {}) {
  gossip::LocalHubOptions options;
  options.world_size = n;
  auto hub = gossip::LocalHub::Create(options);
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      out[r] = [&]() -> Status {
        Node node;
        trainer::TrainerOptions o;
        o.model = model;
        o.precision = trainer::Precision::kFp32;
        o.steps_per_epoch = 1;
        o.batch_size = 8;
        if (tune) tune(o);
        CHORUS_ASSIGN_OR_RETURN(node.trainer, trainer::Trainer::Create(o));
        CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<gossip::LocalTransport> transport, hub->MakeTransport(r));
        node.session.transport = std::move(transport);
        node.session.view = View(r, n, batches, sites);
        CHORUS_ASSIGN_OR_RETURN(node.exchange, MakeExchange(config, &node.session, node.trainer.get(), nullptr));
        return fn(r, node);
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// Images 0..n-1 of a fixed pseudo-random set (labels i % 10).
inline trainer::Batch Images(int first, int n) {
  trainer::Batch b;
  b.size = n;
  for (int k = first; k < first + n; ++k) {
    for (int p = 0; p < 28 * 28; ++p) b.images.push_back(static_cast<float>((k * 7919 + p * 31) % 255) / 255.0f);
    b.labels.push_back(k % 10);
  }
  return b;
}

// The MLP's gradients of Images(0, batch) in one FP32 pass: what every node of
// an all-reduce over a split of those images must end with.
inline std::vector<float> WholeBatchGradients(int batch) {
  trainer::TrainerOptions o;
  o.precision = trainer::Precision::kFp32;
  o.steps_per_epoch = 1;
  o.batch_size = batch;
  std::unique_ptr<trainer::Trainer> whole = std::move(*trainer::Trainer::Create(o));
  EXPECT_TRUE(whole->ForwardBackward(Images(0, batch)).has_value());
  return std::vector<float>(whole->Gradients().begin(), whole->Gradients().end());
}

// Every element of `got` within 1e-5 of the largest |expected| (plus 1e-7):
// the same gradient, summed in another order.
inline void ExpectSameGradients(const std::vector<float>& got, const std::vector<float>& expected, int rank) {
  ASSERT_EQ(got.size(), expected.size()) << "rank " << rank;
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(got[i] - expected[i])));
    norm = std::max(norm, static_cast<double>(std::abs(expected[i])));
  }
  EXPECT_LT(err, 1e-5 * norm + 1e-7) << "rank " << rank;
}

}  // namespace chorus::node
