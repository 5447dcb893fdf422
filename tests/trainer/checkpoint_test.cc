// Tests of checkpoints and the exported model: a save/load round trip resumes
// training bitwise; loading rejects another model, wrong shapes and missing or
// unexpected tensors with errors naming the path and tensor; the export holds
// exactly the PyTorch state_dict.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include "trainer/batch_sampler.h"
#include "trainer/dataset.h"
#include "trainer/safetensors.h"

namespace chorus::trainer {
namespace {

// Where training stands: `step`, `epoch`, `batches` into it.
CheckpointInfo At(int64_t step, int64_t epoch, int64_t batches = 0) {
  CheckpointInfo info;
  info.step = step;
  info.epoch = epoch;
  info.epoch_batches = batches;
  return info;
}


class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chorus_checkpoint_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

TrainerOptions Options(std::string_view model) {
  TrainerOptions o;
  o.model = FromName(kModelNames, model).value();
  o.batch_size = 8;
  o.epochs = 1;
  o.steps_per_epoch = 12;
  o.warmup_epochs = 0.25;
  o.seed = 9;
  o.threads = 1;
  // Grow the scale every 2 clean steps so the scaler state changes in a short run.
  o.loss_scale.growth_interval = 2;
  o.loss_scale.initial_scale = 1024.0;
  return o;
}

std::unique_ptr<Trainer> Make(const TrainerOptions& o) {
  auto t = Trainer::Create(o);
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().ToString());
  return std::move(*t);
}

void Steps(Trainer& t, const Dataset& data, int64_t first, int64_t last) {
  for (int64_t s = first; s < last; ++s) {
    std::vector<int32_t> indices;
    for (int i = 0; i < t.options().batch_size; ++i) {
      indices.push_back(static_cast<int32_t>((s * t.options().batch_size + i) % data.count));
    }
    Batch batch;
    ASSERT_TRUE(MakeBatch(data, indices, &batch).ok());
    ASSERT_TRUE(t.TrainStep(batch, s));
  }
}

bool SameBytes(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST_F(CheckpointTest, RoundTripResumesTrainingBitwise) {
  const Dataset data = MakeSyntheticDataset(64, 2);
  const TrainerOptions o = Options("cnn-bn");
  auto a = Make(o);
  Steps(*a, data, 0, 3);
  ASSERT_TRUE(SaveCheckpoint(*a, At(3, 0), Path("ckpt.safetensors")).ok());
  Steps(*a, data, 3, 6);

  auto b = Make(o);
  auto info = LoadCheckpoint(Path("ckpt.safetensors"), b.get());
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ(info->step, 3);
  EXPECT_EQ(info->epoch, 0);
  Steps(*b, data, 3, 6);

  EXPECT_TRUE(SameBytes(a->MasterWeights(), b->MasterWeights()));
  EXPECT_TRUE(SameBytes(a->optimizer().momentum(), b->optimizer().momentum()));
  EXPECT_TRUE(SameBytes(a->model().buffer_values(), b->model().buffer_values()));
  EXPECT_EQ(a->model().num_batches_tracked(), b->model().num_batches_tracked());
  EXPECT_EQ(a->loss_scaler().scale(), b->loss_scaler().scale());
  EXPECT_EQ(a->loss_scaler().clean_steps(), b->loss_scaler().clean_steps());
  EXPECT_GT(a->loss_scaler().scale(), 1024.0) << "the scaler state must have been exercised";
}

TEST_F(CheckpointTest, RejectsAnotherModelNamingPathAndModels) {
  auto mlp = Make(Options("mlp"));
  ASSERT_TRUE(SaveCheckpoint(*mlp, {}, Path("mlp.safetensors")).ok());
  auto cnn = Make(Options("cnn"));
  auto loaded = LoadCheckpoint(Path("mlp.safetensors"), cnn.get());
  ASSERT_FALSE(loaded);
  const std::string& m = loaded.error().message();
  EXPECT_NE(m.find(Path("mlp.safetensors")), std::string::npos) << m;
  EXPECT_NE(m.find("'mlp'"), std::string::npos) << m;
  EXPECT_NE(m.find("'cnn'"), std::string::npos) << m;
  TrainerOptions sgd = Options("mlp");
  sgd.optimizer = OptimizerKind::kSgd;
  auto other = Make(sgd);
  EXPECT_FALSE(LoadCheckpoint(Path("mlp.safetensors"), other.get()));
}

// Rewrites a saved checkpoint with `edit` applied to its tensors.
void Rewrite(const std::string& from, const std::string& to,
             const std::function<void(std::vector<NamedTensor>*)>& edit) {
  auto file = ReadSafetensors(from);
  ASSERT_TRUE(file) << file.error().ToString();
  std::vector<NamedTensor> tensors = file->tensors;
  edit(&tensors);
  ASSERT_TRUE(WriteSafetensors(to, tensors, file->metadata).ok());
}

// A checkpoint taken mid-epoch (a stopped node) says how far into the epoch;
// one of an older build, without that key, reads as taken at the epoch's end;
// a position past the steps taken is refused, naming the file.
TEST_F(CheckpointTest, KeepsTheBatchesIntoTheEpoch) {
  auto t = Make(Options("mlp"));
  ASSERT_TRUE(SaveCheckpoint(*t, At(17, 1, 5), Path("mid.safetensors")).ok());
  auto mid = LoadCheckpoint(Path("mid.safetensors"), t.get());
  ASSERT_TRUE(mid) << mid.error().ToString();
  EXPECT_EQ(mid->step, 17);
  EXPECT_EQ(mid->epoch, 1);
  EXPECT_EQ(mid->epoch_batches, 5);

  auto file = ReadSafetensors(Path("mid.safetensors"));
  ASSERT_TRUE(file);
  std::map<std::string, std::string> metadata = file->metadata;
  metadata.erase("epoch_batches");
  ASSERT_TRUE(WriteSafetensors(Path("old.safetensors"), file->tensors, metadata).ok());
  auto old = LoadCheckpoint(Path("old.safetensors"), t.get());
  ASSERT_TRUE(old) << old.error().ToString();
  EXPECT_EQ(old->epoch_batches, 0);

  metadata["epoch_batches"] = "18";
  ASSERT_TRUE(WriteSafetensors(Path("past.safetensors"), file->tensors, metadata).ok());
  auto past = LoadCheckpoint(Path("past.safetensors"), t.get());
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message().find(Path("past.safetensors")), std::string::npos) << past.error().message();
  EXPECT_NE(past.error().message().find("epoch_batches 18"), std::string::npos) << past.error().message();
}

// The bytes a member sends a joiner: the same checkpoint in memory, with the
// data order, schedule and the cluster's sample counter, restored bitwise; corrupt bytes are refused naming
// what they are.
TEST_F(CheckpointTest, BytesInMemoryCarryTheDataOrderAndSchedule) {
  auto a = Make(Options("mlp"));
  CheckpointInfo info = At(40, 2, 9);
  info.data_order = "3@0;4:4@1";
  info.partition_batches = 5;
  info.schedule_steps_per_epoch = 31;
  info.global_batch = 192;
  info.sample_counts = "node0#01=640;node1#02=320";
  auto bytes = CheckpointBytes(*a, info);
  ASSERT_TRUE(bytes) << bytes.error().ToString();
  auto b = Make(Options("mlp"));
  auto restored = RestoreCheckpoint(*bytes, "live state from node0", b.get());
  ASSERT_TRUE(restored) << restored.error().ToString();
  EXPECT_EQ(restored->step, 40);
  EXPECT_EQ(restored->epoch_batches, 9);
  EXPECT_EQ(restored->data_order, "3@0;4:4@1");
  EXPECT_EQ(restored->partition_batches, 5);
  EXPECT_EQ(restored->schedule_steps_per_epoch, 31);
  EXPECT_EQ(restored->global_batch, 192);
  EXPECT_EQ(restored->sample_counts, "node0#01=640;node1#02=320");
  EXPECT_EQ(b->ParameterChecksum(), a->ParameterChecksum());

  std::vector<uint8_t> corrupt = *bytes;
  corrupt.resize(corrupt.size() / 2);
  auto bad = RestoreCheckpoint(corrupt, "live state from node0", b.get());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("live state from node0"), std::string::npos) << bad.error().message();
}

TEST_F(CheckpointTest, RejectsWrongShapeMissingAndUnexpectedTensors) {
  auto t = Make(Options("mlp"));
  ASSERT_TRUE(SaveCheckpoint(*t, {}, Path("good.safetensors")).ok());
  const uint64_t before = t->ParameterChecksum();

  Rewrite(Path("good.safetensors"), Path("shape.safetensors"), [](auto* tensors) {
    for (NamedTensor& x : *tensors) {
      if (x.name == "fc2.bias") {
        x.shape = {127};
        x.bytes.resize(127 * sizeof(float));
      }
    }
  });
  auto shape = LoadCheckpoint(Path("shape.safetensors"), t.get());
  ASSERT_FALSE(shape);
  EXPECT_NE(shape.error().message().find("fc2.bias"), std::string::npos);
  EXPECT_NE(shape.error().message().find("[127]"), std::string::npos);
  EXPECT_NE(shape.error().message().find(Path("shape.safetensors")), std::string::npos);

  Rewrite(Path("good.safetensors"), Path("missing.safetensors"), [](auto* tensors) {
    std::erase_if(*tensors, [](const NamedTensor& x) { return x.name == "momentum.fc1.weight"; });
  });
  auto missing = LoadCheckpoint(Path("missing.safetensors"), t.get());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("momentum.fc1.weight"), std::string::npos);

  Rewrite(Path("good.safetensors"), Path("extra.safetensors"), [](auto* tensors) {
    tensors->push_back(NamedTensor{"fc9.weight", "F32", {1}, std::vector<uint8_t>(4)});
  });
  auto extra = LoadCheckpoint(Path("extra.safetensors"), t.get());
  ASSERT_FALSE(extra);
  EXPECT_NE(extra.error().message().find("fc9.weight"), std::string::npos);

  EXPECT_EQ(t->ParameterChecksum(), before) << "a failed load must not change the trainer";
  EXPECT_FALSE(LoadCheckpoint(Path("absent.safetensors"), t.get()));
}

TEST_F(CheckpointTest, ExportHoldsTheStateDictAndLoadsBack) {
  const Dataset data = MakeSyntheticDataset(32, 7);
  auto t = Make(Options("cnn-bn"));
  Steps(*t, data, 0, 2);
  ASSERT_TRUE(ExportModel(*t, Path("model.safetensors")).ok());
  auto file = ReadSafetensors(Path("model.safetensors"));
  ASSERT_TRUE(file);
  std::set<std::string> names;
  for (const NamedTensor& x : file->tensors) names.insert(x.name);
  const std::set<std::string> expected = {
      "conv1.weight",     "conv1.bias",      "bn1.weight",          "bn1.bias",
      "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
      "conv2.weight",     "conv2.bias",      "bn2.weight",          "bn2.bias",
      "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked",
      "fc1.weight",       "fc1.bias",        "fc2.weight",          "fc2.bias"};
  EXPECT_EQ(names, expected);
  EXPECT_EQ(file->metadata.at("format"), "pt");
  const NamedTensor* tracked = file->Find("bn1.num_batches_tracked");
  ASSERT_NE(tracked, nullptr);
  EXPECT_EQ(tracked->dtype, "I64");
  EXPECT_TRUE(tracked->shape.empty());
  int64_t count = 0;
  std::memcpy(&count, tracked->bytes.data(), sizeof(count));
  EXPECT_EQ(count, 2);

  auto fresh = Make(Options("cnn-bn"));
  ASSERT_TRUE(LoadModelWeights(Path("model.safetensors"), fresh.get()).ok());
  EXPECT_TRUE(SameBytes(t->MasterWeights(), fresh->MasterWeights()));
  auto ea = t->Evaluate(data, 16);
  auto eb = fresh->Evaluate(data, 16);
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea->loss, eb->loss);
  // An export is not a checkpoint: resuming from it is refused with a hint.
  auto resume = LoadCheckpoint(Path("model.safetensors"), fresh.get());
  ASSERT_FALSE(resume);
  EXPECT_NE(resume.error().message().find("LoadModelWeights"), std::string::npos);
}

}  // namespace
}  // namespace chorus::trainer
