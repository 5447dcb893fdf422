// The all-reduce exchange with every step audited (exchange.poison_audit_always):
// unequal batches over three in-process nodes still give every node the
// gradient of the whole global batch, in one fusion bucket or two, and every
// step is counted as audited.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "node/exchange/allreduce_exchange.h"
#include "node/exchange/trainer_state.h"
#include "tests/node/exchange/exchange_test_nodes.h"

namespace chorus::node {
namespace {

TEST(AllreduceAuditTest, AuditedStepsGiveTheGradientOfTheWholeGlobalBatch) {
  const std::vector<float> expected = WholeBatchGradients(8);
  const std::vector<int> batches = {2, 3, 3};
  const std::vector<int> first = {0, 2, 5};
  for (int first_bucket_kib : {0, 134}) {
    SCOPED_TRACE("first_bucket_kib " + std::to_string(first_bucket_kib));
    Config config;
    config.exchange.kind = ExchangeKind::kAllreduce;
    config.exchange.first_bucket_kib = first_bucket_kib;
    config.exchange.poison_audit_always = true;
    config.fabric.op_timeout_s = 20.0;
    config.train.batch_size = 8;
    std::vector<std::vector<float>> got(3);
    std::vector<nlohmann::json> poison(3);
    auto statuses = RunNodes(
        3, config, trainer::ModelKind::kMlp,
        [&](int r, Node& node) -> Status {
          ApplySampleWeights(node.exchange->SampleWeighting(), *node.trainer, batches, batches[r]);
          for (int step = 0; step < 2; ++step) {
            CHORUS_RETURN_IF_ERROR(node.exchange->BeforeStep(step));
            CHORUS_RETURN_IF_ERROR(StatusOf(node.trainer->ForwardBackward(Images(first[r], batches[r]))));
            CHORUS_RETURN_IF_ERROR(node.exchange->AfterBackward(step, batches[r]));
          }
          got[r].assign(node.trainer->Gradients().begin(), node.trainer->Gradients().end());
          poison[r] = node.exchange->Metrics()["poison"];
          return node.exchange->Finish();
        },
        batches);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r].ToString();
      ExpectSameGradients(got[r], expected, r);
      EXPECT_EQ(got[r], got[0]) << "rank " << r << " summed differently";
      EXPECT_EQ(poison[r]["audited_steps"], 2) << poison[r].dump();
      EXPECT_EQ(poison[r]["rejected_steps"], 0) << poison[r].dump();
    }
  }
}

}  // namespace
}  // namespace chorus::node
