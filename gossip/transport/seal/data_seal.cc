// DataSeal (see data_seal.h).
#include "gossip/transport/seal/data_seal.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::gossip {
namespace {

constexpr std::array<uint8_t, 4> kDomain = {'C', 'D', 'S', '1'};

template <typename T>
void Put(uint8_t*& out, T value) {
  std::memcpy(out, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out += sizeof(T);
}

// The ChaCha20 key and nonce of one message. Its key is the HChaCha20 subkey
// of the epoch key for the pair (sender, receiver), and its nonce the
// sender's sequence number for that receiver: XChaCha20's construction, with
// the pair in the extended nonce.
struct MessageKey {
  std::array<uint8_t, 32> key;
  std::array<uint8_t, 12> nonce{};
  ~MessageKey() { sodium_memzero(key.data(), key.size()); }
};

MessageKey KeyOf(const DataKey& epoch_key, Rank from, Rank to, uint64_t seq) {
  std::array<uint8_t, crypto_core_hchacha20_INPUTBYTES> pair{};
  uint8_t* p = pair.data();
  Put(p, from);
  Put(p, to);
  std::memcpy(p, kDomain.data(), kDomain.size());
  MessageKey k;
  crypto_core_hchacha20(k.key.data(), pair.data(), epoch_key.data(), nullptr);
  std::memcpy(k.nonce.data() + 4, &seq, sizeof(seq));
  return k;
}

// OpenSSL's Poly1305 (several times libsodium's speed where the CPU has wide
// vector units: docs/design.md, "Authenticated data plane"), one context per
// thread, re-keyed for every message.
EVP_MAC_CTX* ThreadPoly1305() {
  struct Owner {
    EVP_MAC* mac = EVP_MAC_fetch(nullptr, "POLY1305", nullptr);
    EVP_MAC_CTX* ctx = mac != nullptr ? EVP_MAC_CTX_new(mac) : nullptr;
    ~Owner() {
      EVP_MAC_CTX_free(ctx);
      EVP_MAC_free(mac);
    }
  };
  thread_local Owner owner;
  return owner.ctx;
}

// ChaCha20 of `in` into `out` (RFC 8439; block counter from 1: block 0 keys
// the MAC) with OpenSSL.
bool ChaCha20Xor(const MessageKey& k, const uint8_t* in, uint8_t* out, size_t n) {
  std::array<uint8_t, 16> iv{};
  iv[0] = 1;  // the 32-bit block counter, then the 12-byte nonce
  std::memcpy(iv.data() + 4, k.nonce.data(), k.nonce.size());
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  bool ok = ctx != nullptr && EVP_EncryptInit_ex(ctx, EVP_chacha20(), nullptr, k.key.data(), iv.data()) == 1;
  size_t done = 0;
  while (ok && done < n) {
    const int chunk = static_cast<int>(std::min<size_t>(n - done, size_t{1} << 30));
    int written = 0;
    ok = EVP_EncryptUpdate(ctx, out + done, &written, in + done, chunk) == 1 && written == chunk;
    done += static_cast<size_t>(chunk);
  }
  EVP_CIPHER_CTX_free(ctx);
  return ok;
}

}  // namespace

Result<std::shared_ptr<DataSeal>> DataSeal::Make(uint64_t epoch, const DataKey& key, SealMode mode) {
  if (sodium_init() < 0) return Err(Internal("libsodium failed to initialise (sodium_init)"));
  if (ThreadPoly1305() == nullptr) return Err(Internal("OpenSSL has no Poly1305 (EVP_MAC_fetch(\"POLY1305\"))"));
  return std::shared_ptr<DataSeal>(new DataSeal(epoch, key, mode));
}

DataSeal::~DataSeal() { sodium_memzero(const_cast<uint8_t*>(key_.data()), key_.size()); }

bool DataSeal::Matches(uint64_t epoch, const DataKey& key) const {
  return epoch == epoch_ && sodium_memcmp(key.data(), key_.data(), key_.size()) == 0;
}

std::optional<std::array<uint8_t, 16>> DataSeal::Mac(Rank from, Rank to, Tag tag, uint64_t seq,
                                                     std::span<const std::byte> wire_payload) const {
  const MessageKey k = KeyOf(key_, from, to, seq);
  std::array<uint8_t, 32> one_time_key;
  crypto_stream_chacha20_ietf(one_time_key.data(), one_time_key.size(), k.nonce.data(), k.key.data());
  std::array<uint8_t, 4 + 8 + 4 + 4 + 8 + 8 + 8> header;
  uint8_t* p = header.data();
  std::memcpy(p, kDomain.data(), kDomain.size());
  p += kDomain.size();
  Put(p, epoch_);
  Put(p, from);
  Put(p, to);
  Put(p, tag);
  Put(p, static_cast<uint64_t>(wire_payload.size()));
  Put(p, seq);
  EVP_MAC_CTX* ctx = ThreadPoly1305();
  std::array<uint8_t, 16> mac;
  size_t mac_bytes = 0;
  const bool ok = ctx != nullptr && EVP_MAC_init(ctx, one_time_key.data(), one_time_key.size(), nullptr) == 1 &&
                  EVP_MAC_update(ctx, header.data(), header.size()) == 1 &&
                  EVP_MAC_update(ctx, reinterpret_cast<const uint8_t*>(wire_payload.data()), wire_payload.size()) == 1 &&
                  EVP_MAC_final(ctx, mac.data(), &mac_bytes, mac.size()) == 1 && mac_bytes == mac.size();
  sodium_memzero(one_time_key.data(), one_time_key.size());
  if (!ok) return std::nullopt;
  return mac;
}

Result<SealTrailer> DataSeal::Seal(Rank from, Rank to, Tag tag, std::span<const std::byte> payload,
                                   std::span<std::byte> ciphertext) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_[to]++;
  }
  std::span<const std::byte> wire = payload;
  if (mode_ == SealMode::kEncrypt) {
    if (!ChaCha20Xor(KeyOf(key_, from, to, seq), reinterpret_cast<const uint8_t*>(payload.data()),
                     reinterpret_cast<uint8_t*>(ciphertext.data()), payload.size())) {
      return Err(Internal("OpenSSL's ChaCha20 failed to encrypt a message"));
    }
    wire = std::span<const std::byte>(ciphertext.data(), payload.size());
  }
  const auto mac = Mac(from, to, tag, seq, wire);
  if (!mac) return Err(Internal("OpenSSL's Poly1305 failed to seal a message"));
  SealTrailer trailer;
  std::memcpy(trailer.data(), &seq, sizeof(seq));
  std::memcpy(trailer.data() + sizeof(seq), mac->data(), mac->size());
  return trailer;
}

Status DataSeal::Open(Rank from, Rank to, Tag tag, std::span<std::byte> payload, const SealTrailer& trailer) {
  uint64_t seq;
  std::memcpy(&seq, trailer.data(), sizeof(seq));
  const auto mac = Mac(from, to, tag, seq, payload);
  if (!mac) return Internal("OpenSSL's Poly1305 failed to check a message");
  if (sodium_memcmp(mac->data(), trailer.data() + sizeof(seq), mac->size()) != 0) {
    return PermissionDenied("its MAC does not verify under epoch " + std::to_string(epoch_) +
                            "'s key for rank " + std::to_string(from) + " -> rank " + std::to_string(to) +
                            ", tag " + std::to_string(tag) + " (forged, altered, or of another epoch)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!AcceptLocked(from, seq)) {
      return PermissionDenied("a replay: sequence number " + std::to_string(seq) + " from rank " +
                              std::to_string(from) + " was accepted already or is more than " +
                              std::to_string(kReplayWindow) + " behind the newest");
    }
  }
  if (mode_ == SealMode::kEncrypt) {
    auto* bytes = reinterpret_cast<uint8_t*>(payload.data());
    if (!ChaCha20Xor(KeyOf(key_, from, to, seq), bytes, bytes, payload.size())) {
      return Internal("OpenSSL's ChaCha20 failed to decrypt a message");
    }
  }
  return Status::Ok();
}

bool DataSeal::AcceptLocked(Rank from, uint64_t seq) {
  Window& w = windows_[from];
  auto bit = [&](uint64_t s) -> std::pair<uint64_t&, uint64_t> {
    const uint64_t i = s % kReplayWindow;
    return {w.bits[i / 64], uint64_t{1} << (i % 64)};
  };
  if (seq >= w.next) {
    // Slide: the slots of the sequence numbers skipped over become free.
    if (seq - w.next >= kReplayWindow) {
      std::fill(w.bits.begin(), w.bits.end(), 0);
    } else {
      for (uint64_t s = w.next; s < seq; ++s) {
        auto [word, mask] = bit(s);
        word &= ~mask;
      }
    }
    w.next = seq + 1;
    auto [word, mask] = bit(seq);
    word |= mask;
    return true;
  }
  if (w.next - seq > kReplayWindow) return false;
  auto [word, mask] = bit(seq);
  if ((word & mask) != 0) return false;
  word |= mask;
  return true;
}

DataKey PublicTestKey(std::string_view label) {
  DataKey key;
  if (sodium_init() < 0) return key;
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const uint8_t*>(label.data()), label.size(),
                     nullptr, 0);
  return key;
}

}  // namespace chorus::gossip
