// Unequal batches under every exchange, one step on fixed images: four nodes
// as threads over one LocalHub with batches 2/4/4/6 (a global batch of 16,
// sample weights W * b / B = 0.5, 1, 1, 1.5), each node weighted as the
// training loop weights it (ApplySampleWeights with the exchange's
// SampleWeighting). What each node's step must be, exactly:
//   - all-reduce (kGradient): the gradient after AfterBackward is the
//     gradient of all 16 images, as one node computes it for the whole batch,
//     and the update is the plain update of that gradient;
//   - push-sum (kUpdate): the node's own gradient, unweighted, and an update
//     whose lr is weighted by the node's share;
//   - the other gossip protocols (kNone): the node's own gradient and the
//     plain update, whatever its batch.
// The update is compared with a reference trainer's (same initial weights,
// same gradient, the expected lr weight), which is exact; so is the gradient
// up to the summation order. Unweighted or double-weighted gradients or
// updates miss both by the weight's 0.5 or 1.5. (The end of a run cannot
// tell: gossip's final consensus makes the checksums equal whatever the
// weights, and accuracy moves by less than its noise.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "node/exchange/trainer_state.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

const std::vector<int> kBatches = {2, 4, 4, 6};

// The first image of rank r's batch: the ranks' batches are consecutive runs
// of Images, so together they are images 0..15.
int FirstImage(int r) {
  int first = 0;
  for (int k = 0; k < r; ++k) first += kBatches[static_cast<size_t>(k)];
  return first;
}

struct ExchangeCase {
  const char* name;
  Config config;
  Exchange::Weighting weighting;  // as exchange.h documents it for this exchange
};

void PrintTo(const ExchangeCase& c, std::ostream* os) { *os << c.name; }

Config Allreduce(gossip::AllreduceAlgorithm algorithm) {
  Config config;
  config.exchange.kind = ExchangeKind::kAllreduce;
  config.exchange.algorithm = algorithm;
  config.fabric.op_timeout_s = 20.0;
  config.train.batch_size = 8;
  return config;
}

Config Gossip(GossipProtocolKind protocol, topologies::GraphKind graph, int period = 1,
              gossip::CodecKind codec = gossip::CodecKind::kNone) {
  Config config = Allreduce(gossip::AllreduceAlgorithm::kRing);
  config.exchange.kind = ExchangeKind::kGossip;
  config.exchange.protocol = protocol;
  config.exchange.period = period;
  config.exchange.compression.codec = codec;
  config.topology.kind = graph;
  return config;
}

std::unique_ptr<trainer::Trainer> FreshTrainer() {
  trainer::TrainerOptions o;  // as RunNodes makes them: the same initial weights
  o.model = trainer::ModelKind::kMlp;
  o.precision = trainer::Precision::kFp32;
  o.steps_per_epoch = 1;
  o.batch_size = 8;
  return std::move(*trainer::Trainer::Create(o));
}

std::vector<float> Copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// max |a - b| / max |b|.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(a[i] - b[i])));
    norm = std::max(norm, static_cast<double>(std::abs(b[i])));
  }
  return err / std::max(norm, 1e-30);
}

class HeteroExchangeTest : public ::testing::TestWithParam<ExchangeCase> {};

TEST_P(HeteroExchangeTest, EachNodesStepIsWeightedAsTheExchangeDocuments) {
  const ExchangeCase& c = GetParam();
  const int n = static_cast<int>(kBatches.size());
  std::vector<std::vector<float>> gradients(n), before(n), after(n);
  std::vector<double> lr(n);
  auto statuses = RunNodes(
      n, c.config, trainer::ModelKind::kMlp,
      [&](int r, Node& node) -> Status {
        EXPECT_EQ(node.exchange->SampleWeighting(), c.weighting) << c.name;
        ApplySampleWeights(node.exchange->SampleWeighting(), *node.trainer, kBatches, kBatches[r]);
        before[r] = Copy(node.trainer->MasterWeights());
        CHORUS_RETURN_IF_ERROR(node.exchange->BeforeStep(0));
        CHORUS_RETURN_IF_ERROR(StatusOf(node.trainer->ForwardBackward(Images(FirstImage(r), kBatches[r]))));
        CHORUS_RETURN_IF_ERROR(node.exchange->AfterBackward(0, kBatches[r]));
        gradients[r] = Copy(node.trainer->Gradients());
        CHORUS_ASSIGN_OR_RETURN(const trainer::UpdateResult update, node.trainer->ApplyUpdate(0));
        lr[r] = update.lr;
        after[r] = Copy(node.trainer->MasterWeights());  // before any mixing
        CHORUS_RETURN_IF_ERROR(node.exchange->AfterUpdate(0));
        return node.exchange->Finish();
      },
      kBatches);
  for (int r = 0; r < n; ++r) ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].ToString();

  const int global = FirstImage(n);
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(std::string(c.name) + " rank " + std::to_string(r) + " of batch " + std::to_string(kBatches[r]));
    ASSERT_GT(lr[r], 0.0) << "a step of lr 0 shows no weight";
    // The gradient: the whole global batch's under all-reduce, else the node's own.
    std::unique_ptr<trainer::Trainer> reference = FreshTrainer();
    ASSERT_EQ(Copy(reference->MasterWeights()), before[r]);
    const bool whole = c.weighting == Exchange::Weighting::kGradient;
    ASSERT_TRUE(reference->ForwardBackward(whole ? Images(0, global) : Images(FirstImage(r), kBatches[r])).has_value());
    // Summation order only (a float sum of 16 per-image gradients split four
    // ways and a ring's adds): about 1e-7 relative; a missing or repeated
    // weight is off by 0.5 or more.
    EXPECT_LT(RelativeError(gradients[r], Copy(reference->Gradients())), 1e-5) << "gradient";
    // The update of that gradient with the expected lr weight, from the same
    // weights: the same float operations, so equal up to the gradient's
    // rounding above.
    const double share = static_cast<double>(n) * kBatches[r] / global;
    const double update_weight = c.weighting == Exchange::Weighting::kUpdate ? share : 1.0;
    const std::span<float> g = reference->Gradients();
    std::copy(gradients[r].begin(), gradients[r].end(), g.begin());
    reference->SetSampleWeights(1.0, update_weight);
    ASSERT_TRUE(reference->ApplyUpdate(0).has_value());
    std::vector<float> step(after[r].size()), expected(after[r].size());
    for (size_t i = 0; i < step.size(); ++i) {
      step[i] = after[r][i] - before[r][i];
      expected[i] = reference->MasterWeights()[i] - before[r][i];
    }
    EXPECT_LT(RelativeError(step, expected), 1e-4) << "update (expected lr weight " << update_weight << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryExchange, HeteroExchangeTest,
    ::testing::Values(
        ExchangeCase{"ring-allreduce", Allreduce(gossip::AllreduceAlgorithm::kRing), Exchange::Weighting::kGradient},
        ExchangeCase{"tree-allreduce", Allreduce(gossip::AllreduceAlgorithm::kTree), Exchange::Weighting::kGradient},
        ExchangeCase{"dpsgd", Gossip(GossipProtocolKind::kDpsgd, topologies::GraphKind::kRing),
                     Exchange::Weighting::kNone},
        ExchangeCase{"push-sum", Gossip(GossipProtocolKind::kPushSum, topologies::GraphKind::kOnePeerExponential),
                     Exchange::Weighting::kUpdate},
        ExchangeCase{"choco",
                     Gossip(GossipProtocolKind::kChoco, topologies::GraphKind::kRing, 1, gossip::CodecKind::kSign),
                     Exchange::Weighting::kNone},
        ExchangeCase{"local-sgd", Gossip(GossipProtocolKind::kDpsgd, topologies::GraphKind::kComplete, 8),
                     Exchange::Weighting::kNone},
        ExchangeCase{"pairwise", Gossip(GossipProtocolKind::kPairwiseAsync, topologies::GraphKind::kRing),
                     Exchange::Weighting::kNone}),
    [](const ::testing::TestParamInfo<ExchangeCase>& info) {
      std::string name = info.param.name;
      for (char& ch : name) ch = ch == '-' ? '_' : ch;
      return name;
    });

}  // namespace
}  // namespace chorus::node
