# Control-plane messages between Chorus nodes: one Envelope per frame.
#
# A frame on the TCP control connection is
#   [u32 little-endian length L][L bytes: this Envelope, capnp flat encoding][32-byte HMAC]
# (node/control/control_frame.h). The cluster token is never sent: frames are authenticated
# with HMAC-SHA256 under keys derived from it (node/control/control_auth.h), and every frame
# after the handshake is encrypted (ChaCha20) under the session keys.
#
# Connection life: the dialing side sends `hello` (with a fresh nonce); the
# accepting side answers `hello` (its own nonce, and a proof over the dialer's
# nonce) or `reject`; the dialer answers `proof` (over the acceptor's nonce).
# After that both sides use per-connection session keys and may send anything
# below. Membership logic lives in node/control/control_*.cc, not here: this file only
# says what travels, never what a node does with it.
@0xf89acdbddfd24fa0;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("chorus::node::wire");

# Everything that must match exactly between two nodes.
struct Versions {
  chorus @0 :Text;
  libfabric @1 :Text;
  provider @2 :Text;         # "tcp;ofi_rxm", "shm"
  providerVersion @3 :Text;
}

struct Hello {
  versions @0 :Versions;
  nodeName @1 :Text;
  nonce @2 :Data;            # 32 random bytes, fresh for this connection
  proof @3 :Data;            # acceptor only: HMAC over the dialer's nonce; empty from the dialer
  ephemeral @4 :Data;        # 32-byte X25519 public key, fresh for this connection (session keys)
  # With cluster.issuer (per-node credentials, node/control/credentials.h):
  credentialKey @5 :Data;        # the node's Ed25519 public key
  credentialSignature @6 :Data;  # the issuer's signature over nodeName and credentialKey
  transcriptSignature @7 :Data;  # acceptor only: its signature of the handshake transcript
}

# The dialer's answer to the acceptor's nonce; completes the handshake.
struct Proof {
  proof @0 :Data;
  transcriptSignature @1 :Data;  # with cluster.issuer: the dialer's signature of the transcript
}

# What a node tells the cluster about itself (join info). `rank` is -1 in a join
# and the assigned rank in member lists.
struct NodeInfo {
  rank @0 :Int32 = -1;
  name @1 :Text;
  controlAddress @2 :Text;   # "host:port" that peers dial (the advertised address)
  dataAddress @3 :Data;      # opaque data-plane address (libfabric fi_getname blob)
  device @4 :Text;           # "cpu" | "cuda"
  batchSize @5 :UInt32;
  hostGroup @6 :Text;
  rankHint @7 :Int32 = -1;
  site @8 :Text;             # where the node is (cluster.site); empty from older nodes
}

struct Join {
  info @0 :NodeInfo;
  # The settings every member must share, one "key = value" line each
  # (LocalNodeInfo::shared_settings); the coordinator refuses a join whose
  # text differs from its own, naming the first line that does.
  sharedSettings @1 :Text;
  # The node resumes from its checkpoint (--resume). The founding members must
  # agree on it (they synchronise the resumed state collectively at epoch 0);
  # the coordinator refuses a join that differs before the cluster forms.
  resume @2 :Bool;
}

# A membership epoch: proposed (EpochProposal) and then committed (Welcome).
struct EpochView {
  epoch @0 :UInt64;
  proposalId @1 :UInt64;     # random; acks name it so a superseded proposal is not committed
  proposer @2 :Text;         # node name of the proposer
  members @3 :List(NodeInfo);
  departed @4 :List(Int32);  # ranks, in the previous epoch, of members that are gone
  joined @5 :List(Text);     # names of members new in this epoch
  finished @6 :List(Text);   # departed members that left at the end of their run
                             # (a Leave without `stopping`): gone, not failed,
                             # though a member may get this view before their Leave
  stopped @7 :List(Text);    # departed members that left before the end of their run
  dataSalt @8 :Data;         # random, fresh per view: with the cluster key, the
                             # epoch's data-plane key (ClusterKey::DataKey)
  expelled @9 :List(Expulsion);  # every name the cluster expelled so far: refused for the run
  runSalt @10 :Data;         # random, drawn with epoch 0 and copied into every later view:
                             # names the run in what members sign (accusation_proof.h)
  reform @11 :Bool;          # a member asked for it (Heartbeat.reform): it ends the previous
                             # epoch's data-plane operations on every member, as a death does
}

# A node name the members expelled for what it sent (poison), and why.
# With cluster.issuer, `proofs` carries the accusers' signed words
# (accusation_proof.h): one, the sender's, in a heartbeat's accusations; at
# least cluster.expel_quorum in a view's expelled names, so that a member
# checks a conviction instead of taking the proposer's word for it.
struct Expulsion {
  name @0 :Text;
  why @1 :Text;
  proofs @2 :List(AccusationProof);
}

struct AccusationProof {
  accuser @0 :Text;
  credentialKey @1 :Data;        # the accuser's Ed25519 public key
  credentialSignature @2 :Data;  # the issuer's signature over accuser and credentialKey
  signature @3 :Data;            # the accuser's signature of the accusation
}

struct EpochAck {
  epoch @0 :UInt64;
  proposalId @1 :UInt64;
  sender @2 :Text;
}

# `samples`: what the sender has trained so far (the cluster's sample count
# is the sum over members, departed ones included). `joinersAt`: set by the
# coordinator to epoch + 1 while nodes wait to be admitted at `epoch` (0: none),
# so that members whose steps run apart meet for an admission only then.
# `dead`: the members the sender declared dead in `epoch`; it has ended its
# operations of that epoch with them, so the coordinator drops them too.
# `incarnation`: the sender's name and process id (sample_counter.h), whose
# count `samples` is. `counts`: the sender's whole grow-only sample counter,
# every incarnation it knows of, departed ones included; receivers merge it.
# `accusations`: the names the sender's own checks ask the cluster to expel;
# a receiver counts each sender's word once (never relayed), and expels a name
# once `cluster.expel_quorum` members accused it.
struct Heartbeat {
  epoch @0 :UInt64;
  sender @1 :Text;
  samples @2 :UInt64;
  joinersAt @3 :UInt64;
  dead @4 :List(Text);
  incarnation @5 :Text;
  counts @6 :List(SampleCount);
  accusations @7 :List(Expulsion);
  reform @8 :Bool;           # the sender's exchange failed in `epoch` with no member gone:
                             # it asks the coordinator for the next epoch over the same members
}

struct SampleCount {
  incarnation @0 :Text;
  samples @1 :UInt64;
}

# `stopping`: the leaver stops before its run's end (SIGINT/SIGTERM), so the
# others' operations of this epoch that include it cannot complete: they end
# them as for a declared death. Unset at the end of a run, when the others may
# still complete operations it took part in.
struct Leave {
  epoch @0 :UInt64;
  name @1 :Text;
  stopping @2 :Bool;
}

# One node's arrival at a barrier. `seq` counts barriers of the same name within
# one epoch. `advance` is set by the coordinator at the epoch-boundary barrier
# when it will propose the next epoch (pending joiners).
struct Barrier {
  name @0 :Text;
  epoch @1 :UInt64;
  seq @2 :UInt64;
  sender @3 :Text;
  advance @4 :Bool;
  reply @5 :Bool;            # an answer to a re-sent arrival; never answered again
  value @6 :Int64;           # the sender's proposal; the barrier agrees on the largest
}

# From a tool, only `sender`. As the discovery probe of a node that is not in
# a formed cluster yet (node/control/control_discovery.cc), also the prober's
# advertised address, the control addresses it knows, and the terms its join
# would carry (answered by `reject` when they differ).
struct StateRequest {
  sender @0 :Text;
  controlAddress @1 :Text;   # the prober's advertised "host:port"; "" from tools
  known @2 :List(Text);      # control addresses the prober knows
  sharedSettings @3 :Text;   # as in Join
  resume @4 :Bool;           # as in Join
}

# The answer to a StateRequest, and to a join that must wait (for epoch 0 to
# form, or for the next epoch boundary); a founder candidate sends it again to
# its applicants when their number changes.
struct State {
  formed @0 :Bool;           # false while epoch 0 is not fixed yet
  epoch @1 :UInt64;
  members @2 :List(NodeInfo);
  pending @3 :List(Text);    # joiners waiting for the next epoch boundary (or for epoch 0)
  coordinator @4 :Text;      # name of the node that answers for membership
  # Where the answering node stands while it forms (discovery).
  address @5 :Text;          # its advertised control address
  candidate @6 :Bool;        # not formed and the lowest address it knows: it accepts joins for epoch 0
  appliedTo @7 :Text;        # not formed: the address of the node that accepted its join ("" if none)
  appliedFormed @8 :Bool;    # appliedTo is in a formed cluster (admission at its next epoch boundary)
  known @9 :List(Text);      # not formed: the control addresses it knows
  # Formed: where the training loop stands (ControlPlane::ReportProgress), for
  # a joiner to say when it will be admitted.
  step @10 :Int64 = -1;      # the latest step reported; -1 when none was
  nextAdmissionStep @11 :Int64;  # the step of the next admission point; 0 when unknown
  dataSalt @12 :Data;        # formed: the current view's (EpochView.dataSalt)
  reform @13 :Bool;          # formed: the current view was asked for over the same members (EpochView.reform)
}

# "Send your join to the coordinator instead." `formed`: the target is in a
# formed cluster; unset, it is a forming node: the one the sender defers to,
# or the lowest address the sender knows.
struct Redirect {
  coordinatorName @0 :Text;
  coordinatorAddress @1 :Text;
  formed @2 :Bool;
}

enum RejectCode {
  other @0;
  versionMismatch @1;
  authenticationFailed @2;
  duplicateName @3;
  notMember @4;              # the contacted node does not accept joins now (retry after probing again)
  protocol @5;               # unexpected message for the connection's state
  settingsMismatch @6;       # [exchange] / [topology] differ from the coordinator's
  runEnded @7;               # the cluster ended its run before admitting the joiner: nothing is left to train
  expelled @8;               # the members expelled a node of that name for what it sent (poison)
  credentialRefused @9;      # cluster.issuer is set and the dialer's credential does not verify
}

struct Reject {
  code @0 :RejectCode;
  reason @1 :Text;
}

struct Envelope {
  union {
    hello @0 :Hello;
    proof @1 :Proof;
    join @2 :Join;
    welcome @3 :EpochView;
    heartbeat @4 :Heartbeat;
    leave @5 :Leave;
    barrier @6 :Barrier;
    stateRequest @7 :StateRequest;
    state @8 :State;
    epochProposal @9 :EpochView;
    epochAck @10 :EpochAck;
    reject @11 :Reject;
    redirect @12 :Redirect;
  }
}
