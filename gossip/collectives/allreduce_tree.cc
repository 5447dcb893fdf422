// Tree all-reduce, tree reduce and tree broadcast (see allreduce_tree.h).
//
// A `job` is one tree over one part of the buffer, cut into `segments` of
// segment_elems: topologies::MakeDoubleBinaryTree's two trees for a large
// all-reduce (each over half of the buffer), one tree for a small one (flat up
// to 4 ranks, else binary), or topologies::MakeBinaryTree (heap-ordered)
// rotated so that the wanted root is its rank 0 for the one-way steps. Its
// events at this rank are R_j ("reduce segment j": add the
// children's segment j, received into scratch, then send the sum to the parent,
// or at the root send it down to the children) and B_m ("broadcast segment m":
// receive it from the parent and pass it on to the children). The double tree
// runs two jobs, each over half of the buffer.
//
// Progress and pipelining: each event gets a time t. With `h` this rank's height
// in the tree (0 at leaves) and `H` the root's: R_j at j + h, B_m at m + 2H - h
// (all-reduce) or m + H - h (broadcast only). Every event depends only on events
// of strictly smaller t at other ranks (children's R_j, the parent's B_m or the
// root's R_m), and every rank runs its events of all jobs in (t, job, kind)
// order with non-blocking sends, so no cycle of waits can form; the times also
// let the leaves keep sending segment j+2(H-h) up while segment j comes down,
// which is what keeps every link busy. Receives are posted inflight_segments
// ahead; broadcast receives land straight in the buffer unless the region is
// still being sent up (then via scratch and a copy once that send is done).
#include "gossip/collectives/allreduce_tree.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "gossip/collectives/collective_internal.h"
#include "topologies/chunking.h"
#include "topologies/tree_schedule.h"

namespace chorus::gossip {

namespace detail {

namespace {

// A topologies::Tree relabelled by `shift` (label l becomes rank (l + shift) mod n),
// with every rank's height: 0 at leaves, 1 + the largest child height above.
struct TreeShape {
  int root = 0;
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
  std::vector<int> height;
  int tree_height() const { return height[root]; }
};

TreeShape ShapeOf(const topologies::Tree& tree, int shift) {
  const int n = static_cast<int>(tree.nodes.size());
  auto rank_of = [&](int label) { return (label + shift) % n; };
  TreeShape shape;
  shape.root = rank_of(tree.root);
  shape.parent.assign(n, -1);
  shape.children.resize(n);
  shape.height.assign(n, 0);
  for (int label = 0; label < n; ++label) {
    const int p = tree.nodes[label].parent;
    shape.parent[rank_of(label)] = p < 0 ? -1 : rank_of(p);
    for (int c : tree.nodes[label].children) shape.children[rank_of(label)].push_back(rank_of(c));
  }
  // Breadth-first order from the root; heights are final in reverse order.
  std::vector<int> order{shape.root};
  for (size_t k = 0; k < order.size(); ++k) {
    for (int c : shape.children[order[k]]) order.push_back(c);
  }
  for (size_t k = order.size(); k-- > 0;) {
    const int r = order[k];
    for (int c : shape.children[r]) shape.height[r] = std::max(shape.height[r], shape.height[c] + 1);
  }
  return shape;
}

template <typename T>
struct TreeJob {
  TreeShape tree;
  std::span<T> data;
  bool reduce = true;
  bool broadcast = true;
  Tag reduce_tag = 0;
  Tag broadcast_tag = 0;
};

template <typename T>
class TreeRunner {
 public:
  TreeRunner(const CollectiveGroup& group, TreeJob<T> job, const TreeParams& params)
      : group_(group), job_(std::move(job)), params_(params),
        self_(group.self()),
        parent_rank_(job_.tree.parent[self_]),
        children_ranks_(job_.tree.children[self_]),
        height_(job_.tree.height[self_]),
        root_(job_.tree.root == self_),
        segment_(std::max<size_t>(params.segment_elems, 1)),
        segments_((job_.data.size() + segment_ - 1) / segment_) {
    size_t slot = segment_;
    int window = params_.inflight_segments;
    CapSegments(job_.data.size(), &slot, &window);
    if (job_.reduce) {
      for (int child : children_ranks_) {
        children_.push_back(std::make_unique<RecvStream<T>>(group_, child, slot, window));
      }
      child_posted_.assign(children_ranks_.size(), 0);
      up_sends_.resize(segments_);
    }
    if (job_.broadcast && !root_) {
      parent_ = std::make_unique<RecvStream<T>>(group_, parent_rank_, slot, window);
    }
  }

  Status RunReduce() {
    const size_t j = next_r_;
    auto dest = Region(j);
    for (size_t c = 0; c < children_.size(); ++c) {
      RecvStream<T>& in = *children_[c];
      while (!in.Full() && child_posted_[c] < segments_) {
        CHORUS_RETURN_IF_ERROR(
            in.Post(job_.reduce_tag, std::span<T>(), Region(child_posted_[c]).size()));
        ++child_posted_[c];
      }
      auto got_or = in.Next(params_.deadline);
      if (!got_or) {
        return got_or.error().WithContext("tree reduce segment " + std::to_string(j) +
                                          " from child");
      }
      const std::span<T> got = *got_or;
      if constexpr (std::is_same_v<T, std::byte>) {
        return Internal("tree reduce: byte buffers cannot be reduced");
      } else {
        AddInto(dest.data(), got.data(), got.size());
      }
    }
    if (root_) {
      if (job_.broadcast) CHORUS_RETURN_IF_ERROR(SendToChildren(dest));
    } else {
      auto request = group_.transport().Isend(group_.RankAt(parent_rank_), job_.reduce_tag,
                                              AsBytes(dest));
      if (!request) return request.error().WithContext("tree reduce send to parent");
      up_sends_[j] = std::move(*request);
    }
    ++next_r_;
    return Status::Ok();
  }

  Status RunBroadcast() {
    const size_t m = next_b_;
    auto dest = Region(m);
    if (!root_) {
      while (!parent_->Full() && parent_posted_ < segments_) {
        const size_t p = parent_posted_;
        auto region = Region(p);
        const bool direct = !job_.reduce || (p < next_r_ && up_sends_[p]->Done());
        CHORUS_RETURN_IF_ERROR(
            parent_->Post(job_.broadcast_tag, direct ? region : std::span<T>(), region.size()));
        ++parent_posted_;
      }
      auto got_or = parent_->Next(params_.deadline);
      if (!got_or) {
        return got_or.error().WithContext("tree broadcast segment " + std::to_string(m) +
                                          " from parent");
      }
      const std::span<T> got = *got_or;
      if (got.data() != dest.data()) {
        // The parent's data depends on this rank's send of the region, so the
        // send is done or about to be.
        auto done = up_sends_[m]->Wait(params_.deadline);
        if (!done) return done.error().WithContext("tree reduce send to parent");
        std::memcpy(dest.data(), got.data(), got.size_bytes());
      }
    }
    CHORUS_RETURN_IF_ERROR(SendToChildren(dest));
    ++next_b_;
    return Status::Ok();
  }

  Status Finish() {
    CHORUS_RETURN_IF_ERROR(WaitAll(up_sends_, params_.deadline));
    return WaitAll(down_sends_, params_.deadline);
  }

  // Event helpers for the scheduler: R and B events in their own orders.
  bool HasReduce() const { return job_.reduce && next_r_ < segments_; }
  int64_t ReduceTime() const { return static_cast<int64_t>(next_r_) + height_; }
  bool HasBroadcast() const {
    return job_.broadcast && (!job_.reduce || !root_) && next_b_ < segments_;
  }
  int64_t BroadcastTime() const {
    const int64_t h = height_;
    const int64_t big_h = job_.tree.tree_height();
    return static_cast<int64_t>(next_b_) + (job_.reduce ? 2 * big_h - h : big_h - h);
  }

 private:
  std::span<T> Region(size_t k) const {
    const size_t begin = k * segment_;
    return job_.data.subspan(begin, std::min(segment_, job_.data.size() - begin));
  }

  Status SendToChildren(std::span<T> part) {
    for (int child : children_ranks_) {
      auto request =
          group_.transport().Isend(group_.RankAt(child), job_.broadcast_tag, AsBytes(part));
      if (!request) return request.error().WithContext("tree broadcast send to child");
      down_sends_.push_back(std::move(*request));
    }
    return Status::Ok();
  }

  const CollectiveGroup& group_;
  TreeJob<T> job_;
  const TreeParams params_;
  const int self_;
  const int parent_rank_;                // group index; -1 at the root
  const std::vector<int> children_ranks_;  // group indices
  const int height_;
  const bool root_;
  const size_t segment_;
  const size_t segments_;
  std::vector<std::unique_ptr<RecvStream<T>>> children_;
  std::vector<size_t> child_posted_;
  std::unique_ptr<RecvStream<T>> parent_;
  size_t parent_posted_ = 0;
  std::vector<RequestPtr> up_sends_;    // by segment
  std::vector<RequestPtr> down_sends_;
  size_t next_r_ = 0;
  size_t next_b_ = 0;
};

// Runs the events of every job in (time, job, kind) order (see the file comment).
template <typename T>
Status RunJobs(const CollectiveGroup& group, std::vector<TreeJob<T>> jobs,
               const TreeParams& params) {
  std::vector<std::unique_ptr<TreeRunner<T>>> runners;
  for (auto& job : jobs) {
    runners.push_back(std::make_unique<TreeRunner<T>>(group, std::move(job), params));
  }
  while (true) {
    int best = -1;
    int best_kind = 0;
    int64_t best_time = 0;
    for (int j = 0; j < static_cast<int>(runners.size()); ++j) {
      const TreeRunner<T>& r = *runners[j];
      for (int kind = 0; kind < 2; ++kind) {
        const bool has = kind == 0 ? r.HasReduce() : r.HasBroadcast();
        if (!has) continue;
        const int64_t time = kind == 0 ? r.ReduceTime() : r.BroadcastTime();
        if (best < 0 || time < best_time) {  // ties keep the earlier (job, kind)
          best = j;
          best_kind = kind;
          best_time = time;
        }
      }
    }
    if (best < 0) break;
    TreeRunner<T>& r = *runners[best];
    CHORUS_RETURN_IF_ERROR(best_kind == 0 ? r.RunReduce() : r.RunBroadcast());
  }
  for (auto& r : runners) CHORUS_RETURN_IF_ERROR(r->Finish());
  return Status::Ok();
}

// One tree for a small all-reduce is flat up to this many ranks, else binary.
constexpr int kFlatTreeMaxRanks = 4;

}  // namespace

template <typename T>
Status TreeSum(const CollectiveGroup& group, std::span<T> data, const AllreduceOptions& options) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  TreeParams params{options.segment_elems, options.inflight_segments, options.tag_base,
                    options.deadline};
  auto tag = [&](CollectivePhase phase, uint32_t tree) {
    return CollectiveTag(options.tag_base, phase, tree);
  };
  std::vector<TreeJob<T>> jobs;
  if (data.size_bytes() > options.single_tree_max_bytes) {
    CHORUS_ASSIGN_OR_RETURN(const topologies::DoubleBinaryTree trees,
                            topologies::MakeDoubleBinaryTree(n));
    CHORUS_ASSIGN_OR_RETURN(const std::vector<topologies::Range> halves,
                            topologies::PartitionChunks(static_cast<int64_t>(data.size()), 2));
    auto half = [&](int h) {
      return data.subspan(static_cast<size_t>(halves[h].begin),
                          static_cast<size_t>(halves[h].size()));
    };
    jobs.push_back(TreeJob<T>{ShapeOf(trees.first, 0), half(0), true, true,
                              tag(CollectivePhase::kTreeReduce, 0),
                              tag(CollectivePhase::kTreeBroadcast, 0)});
    jobs.push_back(TreeJob<T>{ShapeOf(trees.second, 0), half(1), true, true,
                              tag(CollectivePhase::kTreeReduce, 1),
                              tag(CollectivePhase::kTreeBroadcast, 1)});
  } else {
    // Up to 4 ranks the flat tree: 2 hops instead of the binary tree's 4 at
    // 4 ranks, the same 6 messages (4 ranks on 2 cores, 4 KiB, us, medians of
    // 6 and 8 alternated runs: tcp;ofi_rxm 67 / 62 against 87 / 77; net 61
    // against 66; a tie at 16 KiB and, flat, at 8 ranks).
    CHORUS_ASSIGN_OR_RETURN(const topologies::Tree tree,
                            n <= kFlatTreeMaxRanks ? topologies::MakeFlatTree(n) : topologies::MakeBinaryTree(n));
    jobs.push_back(TreeJob<T>{ShapeOf(tree, 0), data, true, true,
                              tag(CollectivePhase::kTreeReduce, 0),
                              tag(CollectivePhase::kTreeBroadcast, 0)});
  }
  return RunJobs(group, std::move(jobs), params);
}

template <typename T>
Status TreeReduceTo(const CollectiveGroup& group, std::span<T> data, int root,
                    const TreeParams& params) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(const topologies::Tree tree, topologies::MakeBinaryTree(n));
  std::vector<TreeJob<T>> jobs;
  jobs.push_back(TreeJob<T>{ShapeOf(tree, root), data, true, false,
                            CollectiveTag(params.tag_base, CollectivePhase::kTreeReduce, 0),
                            CollectiveTag(params.tag_base, CollectivePhase::kTreeBroadcast, 0)});
  return RunJobs(group, std::move(jobs), params);
}

template <typename T>
Status TreeBroadcastFrom(const CollectiveGroup& group, std::span<T> data, int root,
                         const TreeParams& params) {
  const int n = group.size();
  if (n == 1 || data.empty()) return Status::Ok();
  CHORUS_ASSIGN_OR_RETURN(const topologies::Tree tree, topologies::MakeBinaryTree(n));
  std::vector<TreeJob<T>> jobs;
  jobs.push_back(TreeJob<T>{ShapeOf(tree, root), data, false, true,
                            CollectiveTag(params.tag_base, CollectivePhase::kTreeReduce, 0),
                            CollectiveTag(params.tag_base, CollectivePhase::kTreeBroadcast, 0)});
  return RunJobs(group, std::move(jobs), params);
}

template Status TreeSum<float>(const CollectiveGroup&, std::span<float>, const AllreduceOptions&);
template Status TreeSum<uint16_t>(const CollectiveGroup&, std::span<uint16_t>,
                                  const AllreduceOptions&);
template Status TreeReduceTo<float>(const CollectiveGroup&, std::span<float>, int,
                                    const TreeParams&);
template Status TreeReduceTo<uint16_t>(const CollectiveGroup&, std::span<uint16_t>, int,
                                       const TreeParams&);
template Status TreeBroadcastFrom<float>(const CollectiveGroup&, std::span<float>, int,
                                         const TreeParams&);
template Status TreeBroadcastFrom<uint16_t>(const CollectiveGroup&, std::span<uint16_t>, int,
                                            const TreeParams&);
template Status TreeBroadcastFrom<std::byte>(const CollectiveGroup&, std::span<std::byte>, int,
                                             const TreeParams&);

}  // namespace detail

Status AllreduceTree(const CollectiveGroup& group, std::span<float> data,
                     const AllreduceOptions& options) {
  return detail::RunAllreduce(group, data, options, "tree all-reduce",
                              [&] { return detail::TreeSum(group, data, options); });
}

Status AllreduceTree(const CollectiveGroup& group, std::span<uint16_t> half,
                     const AllreduceOptions& options) {
  return detail::RunAllreduce(group, half, options, "tree all-reduce (fp16)",
                              [&] { return detail::TreeSum(group, half, options); });
}

}  // namespace chorus::gossip
