// Tests of the Trainer: option validation, batch checks, the loss-scaler skip
// path, hooks, bitwise determinism (mlp and cnn-bn in FP16), and a short real
// Fashion-MNIST run whose accuracy must rise well above chance.
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <cstring>
#include <filesystem>
#include <vector>

#include "trainer/batch_sampler.h"
#include "trainer/dataset.h"

namespace chorus::trainer {
namespace {

TrainerOptions SmallOptions(std::string_view model) {
  TrainerOptions o;
  o.model = FromName(kModelNames, model).value();
  o.batch_size = 16;
  o.epochs = 2;
  o.steps_per_epoch = 10;
  o.warmup_epochs = 0.5;
  o.seed = 42;
  o.threads = 1;
  return o;
}

std::unique_ptr<Trainer> MakeTrainer(const TrainerOptions& options) {
  auto trainer = Trainer::Create(options);
  EXPECT_TRUE(trainer.has_value()) << (trainer ? "" : trainer.error().ToString());
  return std::move(*trainer);
}

// Runs `steps` training steps over a synthetic data set; returns the last loss.
double Train(Trainer& trainer, const Dataset& data, int steps, int64_t first_step = 0) {
  BatchSampler sampler(data.count, trainer.options().batch_size, 5, 0, 1);
  Batch batch;
  double loss = 0;
  int epoch = 0;
  sampler.StartEpoch(epoch);
  for (int s = 0; s < steps; ++s) {
    if (!sampler.Next(data, &batch)) {
      sampler.StartEpoch(++epoch);
      EXPECT_TRUE(sampler.Next(data, &batch));
    }
    auto result = trainer.TrainStep(batch, first_step + s);
    EXPECT_TRUE(result.has_value()) << (result ? "" : result.error().ToString());
    loss = result->pass.loss;
  }
  return loss;
}

// Unknown model, precision and optimizer names: tests/trainer/choices_test.cc.
TEST(Trainer, CreateRejectsBadOptionsNamingThem) {
  TrainerOptions o = SmallOptions("mlp");
  o.steps_per_epoch = 0;
  EXPECT_NE(Trainer::Create(o).error().message().find("steps_per_epoch"), std::string::npos);
  o = SmallOptions("mlp");
  o.loss_scale.growth_factor = 0.5;
  EXPECT_NE(Trainer::Create(o).error().message().find("growth_factor"), std::string::npos);
}

TEST(Trainer, ParameterChecksumIsEqualForEqualWeightsAndChangesWithAnyOne) {
  auto a = MakeTrainer(SmallOptions("mlp"));
  auto b = MakeTrainer(SmallOptions("mlp"));
  const uint64_t sum = a->ParameterChecksum();
  EXPECT_EQ(b->ParameterChecksum(), sum);  // the same seed, the same weights
  std::span<float> w = b->MasterWeights();
  // In each of the four lanes, in the tail, and in a sign or a lowest bit.
  for (size_t at : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{8}, w.size() / 2, w.size() - 1}) {
    const float kept = w[at];
    w[at] = -kept;
    if (kept != 0.0f) {
      EXPECT_NE(b->ParameterChecksum(), sum) << at;
    }
    w[at] = std::nextafter(kept, 2.0f * kept + 1.0f);
    EXPECT_NE(b->ParameterChecksum(), sum) << at;
    w[at] = kept;
    EXPECT_EQ(b->ParameterChecksum(), sum) << at;
  }
}

TEST(Trainer, ForwardBackwardChecksTheBatch) {
  auto trainer = MakeTrainer(SmallOptions("mlp"));
  Batch batch;
  batch.size = 2;
  batch.images.assign(2 * 784, 0.0f);
  batch.labels = {1, 10};
  auto bad_label = trainer->ForwardBackward(batch);
  ASSERT_FALSE(bad_label);
  EXPECT_NE(bad_label.error().message().find("label 10"), std::string::npos);
  batch.labels = {1, 2};
  batch.images.resize(784);
  EXPECT_FALSE(trainer->ForwardBackward(batch));
  batch.images.resize(2 * 784);
  batch.height = 14;
  EXPECT_FALSE(trainer->ForwardBackward(batch));
  batch.height = 28;
  auto ok = trainer->ForwardBackward(batch);
  ASSERT_TRUE(ok) << ok.error().ToString();
  EXPECT_EQ(ok->samples, 2);
}

// A batch of rows alone trains as the batch of their images: on the CPU the
// trainer gathers it on the host (nothing is held there), bit for bit.
TEST(Trainer, ABatchOfRowsTrainsAsItsImages) {
  const Dataset data = MakeSyntheticDataset(96, 4);
  auto images = MakeTrainer(SmallOptions("cnn-bn"));
  auto rows = MakeTrainer(SmallOptions("cnn-bn"));
  ASSERT_TRUE(rows->HoldTrainingSet(data).ok());
  EXPECT_EQ(rows->ContentsFor(data), BatchContents::kImages);  // the CPU holds nothing
  BatchSampler a(data.count, 16, 5, 0, 1), b(data.count, 16, 5, 0, 1);
  a.StartEpoch(0);
  b.StartEpoch(0);
  Batch x, y;
  for (int step = 0; a.Next(data, &x) && b.Next(data, &y, BatchContents::kRows); ++step) {
    ASSERT_TRUE(y.images.empty());
    ASSERT_EQ(y.labels, x.labels);
    ASSERT_EQ(y.rows, x.rows);
    auto p = images->TrainStep(x, step);
    auto q = rows->TrainStep(y, step);
    ASSERT_TRUE(p && q) << (q ? "" : q.error().ToString());
    EXPECT_EQ(p->pass.loss, q->pass.loss);
  }
  EXPECT_EQ(images->ParameterChecksum(), rows->ParameterChecksum());
  y.rows[0] = -1;
  auto refused = rows->ForwardBackward(y);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().ToString().find("index -1 (position 0)"), std::string::npos) << refused.error().ToString();
}

TEST(Trainer, LearnsSyntheticDataAndFiresHooks) {
  TrainerOptions o = SmallOptions("mlp");
  o.base_lr = 2.0;  // peak lr 0.125 at batch 16; LARS step ~ lr * eta of the weight norm
  o.lars_eta = 0.02;
  auto trainer = MakeTrainer(o);
  const Dataset data = MakeSyntheticDataset(320, 3);
  int ready = 0, done = 0;
  int64_t last_step = -1;
  trainer->SetGradientReadyHook([&](int) { ++ready; });
  trainer->SetStepDoneHook([&](int64_t step, const UpdateResult& u) {
    ++done;
    last_step = step;
    EXPECT_TRUE(u.applied);
    EXPECT_EQ(u.lr, trainer->LearningRate(step));
  });
  const uint64_t initial = trainer->ParameterChecksum();
  Batch first;
  BatchSampler sampler(data.count, o.batch_size, 5, 0, 1);
  ASSERT_TRUE(sampler.Next(data, &first));
  const double initial_loss = trainer->ForwardBackward(first)->loss;
  const double last_loss = Train(*trainer, data, 20);
  EXPECT_EQ(ready, 21 * 6);  // 6 parameters, 21 backward passes
  EXPECT_EQ(done, 20);
  EXPECT_EQ(last_step, 19);
  EXPECT_NE(trainer->ParameterChecksum(), initial);
  // Synthetic classes are prototypes plus noise, separable after a few steps:
  // 20 steps take the loss from ~2.3 to ~1.3 and classify nearly all images.
  EXPECT_LT(last_loss, 0.75 * initial_loss);
  auto eval = trainer->Evaluate(data, 64);
  ASSERT_TRUE(eval);
  EXPECT_GT(eval->accuracy, 0.9);
}

TEST(Trainer, OverflowSkipsTheStepAndBacksOff) {
  TrainerOptions o = SmallOptions("mlp");
  o.loss_scale.initial_scale = 1073741824.0;  // 2^30: dlogits overflow FP16
  o.loss_scale.max_scale = 1073741824.0;
  auto trainer = MakeTrainer(o);
  const Dataset data = MakeSyntheticDataset(16, 4);
  Batch batch;
  BatchSampler sampler(data.count, o.batch_size, 5, 0, 1);
  ASSERT_TRUE(sampler.Next(data, &batch));
  const uint64_t before = trainer->ParameterChecksum();
  auto step = trainer->TrainStep(batch, 0);
  ASSERT_TRUE(step);
  EXPECT_FALSE(step->update.applied);
  EXPECT_EQ(step->update.loss_scale, 536870912.0);
  EXPECT_EQ(trainer->ParameterChecksum(), before) << "a skipped step must not move weights";
  EXPECT_EQ(trainer->loss_scaler().skipped_steps(), 1);
  // Halving each time, the scale soon gets small enough for a clean step.
  int steps = 1;
  while (!trainer->TrainStep(batch, steps)->update.applied) ASSERT_LT(++steps, 30);
  EXPECT_NE(trainer->ParameterChecksum(), before);
  EXPECT_EQ(trainer->loss_scaler().skipped_steps(), steps);
}

TEST(Trainer, Fp32HasNoLossScaling) {
  TrainerOptions o = SmallOptions("mlp");
  o.precision = Precision::kFp32;
  auto trainer = MakeTrainer(o);
  EXPECT_EQ(trainer->loss_scaler().scale(), 1.0);
  EXPECT_TRUE(trainer->model().working_half().empty());
  Train(*trainer, MakeSyntheticDataset(64, 1), 3);
  EXPECT_EQ(trainer->loss_scaler().scale(), 1.0);
}

// Same seed, one thread: two runs give bitwise identical master weights.
void ExpectDeterministic(std::string_view model, int steps) {
  TrainerOptions o = SmallOptions(model);
  const Dataset data = MakeSyntheticDataset(96, 8);
  auto a = MakeTrainer(o);
  auto b = MakeTrainer(o);
  Train(*a, data, steps);
  Train(*b, data, steps);
  const auto wa = a->MasterWeights();
  const auto wb = b->MasterWeights();
  ASSERT_EQ(wa.size(), wb.size());
  EXPECT_EQ(std::memcmp(wa.data(), wb.data(), wa.size_bytes()), 0) << model;
  EXPECT_EQ(a->ParameterChecksum(), b->ParameterChecksum());
  const auto ba = a->model().buffer_values();
  EXPECT_TRUE(std::equal(ba.begin(), ba.end(), b->model().buffer_values().begin()));
  auto fresh = MakeTrainer(o);
  EXPECT_NE(fresh->ParameterChecksum(), a->ParameterChecksum()) << "training must move weights";
}

TEST(Trainer, MlpFp16IsBitwiseDeterministic) { ExpectDeterministic("mlp", 12); }

TEST(Trainer, CnnBnFp16IsBitwiseDeterministic) { ExpectDeterministic("cnn-bn", 4); }

TEST(Trainer, RefreshWorkingCopyAfterExternalChange) {
  auto a = MakeTrainer(SmallOptions("mlp"));
  auto b = MakeTrainer(SmallOptions("mlp"));
  const Dataset data = MakeSyntheticDataset(16, 6);
  // Simulate gossip mixing: b's master becomes a's after a trained a step.
  Train(*a, data, 1);
  std::memcpy(b->MasterWeights().data(), a->MasterWeights().data(),
              a->MasterWeights().size_bytes());
  EXPECT_EQ(a->ParameterChecksum(), b->ParameterChecksum());
  b->RefreshWorkingCopy();
  const auto ha = a->model().working_half();
  EXPECT_TRUE(std::equal(ha.begin(), ha.end(), b->model().working_half().begin()));
  auto ea = a->Evaluate(data, 8);
  auto eb = b->Evaluate(data, 8);
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea->loss, eb->loss);
}

// Fresh gradient storage mid-run (a transport may still write into the old):
// training goes on bitwise as without it, and the old storage is neither
// written by the layers nor freed.
TEST(Trainer, ReplacedGradientStorageTrainsAlikeAndLeavesTheOldAlone) {
  for (const char* model : {"mlp", "cnn-bn"}) {
    SCOPED_TRACE(model);
    const Dataset data = MakeSyntheticDataset(96, 8);
    auto a = MakeTrainer(SmallOptions(model));
    auto b = MakeTrainer(SmallOptions(model));
    Train(*a, data, 3);
    Train(*b, data, 3);
    const std::span<float> old = b->Gradients();
    b->ReplaceGradientStorage();
    EXPECT_NE(b->Gradients().data(), old.data());
    std::fill(old.begin(), old.end(), 7.0f);  // what a late receive could write
    Train(*a, data, 3, 3);
    Train(*b, data, 3, 3);
    EXPECT_EQ(a->ParameterChecksum(), b->ParameterChecksum());
    EXPECT_TRUE(std::all_of(old.begin(), old.end(), [](float g) { return g == 7.0f; }));
    const std::span<float> ga = a->Gradients(), gb = b->Gradients();
    EXPECT_TRUE(std::equal(ga.begin(), ga.end(), gb.begin()));
  }
}

TEST(Trainer, EvaluateChecksTheDataSet) {
  auto trainer = MakeTrainer(SmallOptions("mlp"));
  Dataset data = MakeSyntheticDataset(10, 1);
  auto ok = trainer->Evaluate(data, 4);  // batches of 4, 4, 2
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->count, 10);
  EXPECT_GE(ok->accuracy, 0.0);
  EXPECT_LE(ok->accuracy, 1.0);
  EXPECT_FALSE(trainer->Evaluate(data, 0));
  data.labels[3] = -1;
  EXPECT_FALSE(trainer->Evaluate(data, 4));
}

TEST(Trainer, LearnsRealFashionMnist) {
  const std::string dir = kFashionMnistDefaultDir;
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST not installed at " << dir;
  }
  auto train = LoadFashionMnist(dir, Split::kTrain, 5000);
  auto test = LoadFashionMnist(dir, Split::kTest, 2000);
  ASSERT_TRUE(train && test);
  TrainerOptions o;  // the recommended defaults
  o.model = ModelKind::kMlp;
  o.epochs = 1;
  o.warmup_epochs = 0.2;
  BatchSampler sampler(train->count, o.batch_size, 1, 0, 1);
  o.steps_per_epoch = sampler.BatchesPerEpoch();
  auto trainer = MakeTrainer(o);
  sampler.StartEpoch(0);
  Batch batch;
  for (int64_t step = 0; sampler.Next(*train, &batch); ++step) {
    ASSERT_TRUE(trainer->TrainStep(batch, step));
  }
  auto eval = trainer->Evaluate(*test, 500);
  ASSERT_TRUE(eval);
  // Chance is 0.1; one epoch on 5000 images reaches about 0.75-0.8 with mlp.
  EXPECT_GT(eval->accuracy, 0.6);
}

}  // namespace
}  // namespace chorus::trainer
