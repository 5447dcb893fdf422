// PartSigner: signatures on the parts of an agreed all-gather
// (Collective::AgreedAllgather). Unsigned, a rank that relays another's part
// in the second round may alter it, so a receiver can only take the value
// most copies hold, which needs four ranks to outvote one liar. Signed by its
// sender, a relayed part is either the sender's or refused: a rank takes the
// one part that carries a valid signature of its sender, however few copies
// hold it, and a sender whose valid signatures cover two different parts has
// equivocated, provably, on every honest rank alike. So three ranks agree
// despite one liar (Dolev and Strong's authenticated agreement, two rounds
// for one faulty rank).
//
// Signatures ride in the gather's floats, bit for bit (they are copied,
// never computed with).
//
// Must not: sign for a rank other than the caller's, or accept a signature
// made for another gather (the tag base is signed) or another rank.
#pragma once

#include <cstddef>
#include <span>

#include "gossip/transport/transport.h"

namespace chorus::gossip {

class PartSigner {
 public:
  virtual ~PartSigner() = default;
  // How many floats a signature takes in the gather.
  virtual size_t SignatureFloats() const = 0;
  // This rank's signature of `part`, sent in the gather of tag base
  // `gather`, into `signature` (SignatureFloats() floats).
  virtual void Sign(Tag gather, std::span<const float> part, std::span<float> signature) const = 0;
  // Whether `signature` is transport rank `sender`'s over `part` in the
  // gather of tag base `gather`.
  virtual bool Verify(Rank sender, Tag gather, std::span<const float> part,
                      std::span<const float> signature) const = 0;
};

}  // namespace chorus::gossip
