#include "tokenizer/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include "tokenizer/metaspace_words.h"
#include "tokenizer/word_cache.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>

namespace fptrain::tokenizer {
namespace {

// Minimal protobuf wire-format reading and writing, enough to swap the
// NormalizerSpec of a ModelProto without the protobuf library.
uint64_t read_varint(const std::string& buf, size_t& pos, const std::string& file) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= buf.size()) throw std::runtime_error(file + ": truncated SentencePiece model");
    const auto b = static_cast<unsigned char>(buf[pos++]);
    value |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return value;
  }
  throw std::runtime_error(file + ": corrupt SentencePiece model (bad varint)");
}

void write_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Calls `visit(field, wire_type, begin, payload, end)` for each field of the
// message in buf[begin, end): [begin, end) is the whole encoded field, payload
// where its value starts.
template <typename Visit>
void for_each_field(const std::string& buf, size_t begin, size_t end, const std::string& file, Visit visit) {
  size_t pos = begin;
  while (pos < end) {
    const size_t field_begin = pos;
    const uint64_t tag = read_varint(buf, pos, file);
    const auto field = static_cast<uint32_t>(tag >> 3);
    const auto wire = static_cast<uint32_t>(tag & 7);
    size_t payload = pos;
    // Every length is checked against the bytes left before it is used, so a
    // corrupt length can neither wrap `pos` around nor make us copy past `end`.
    auto skip = [&](uint64_t length) {
      if (pos > end || length > end - pos)
        throw std::runtime_error(file + ": corrupt SentencePiece model: field " + std::to_string(field) + " at byte " +
                                 std::to_string(field_begin) + " has length " + std::to_string(length) +
                                 " but its message has " + std::to_string(pos > end ? 0 : end - pos) +
                                 " bytes left (truncated or not a tokenizer.model)");
      pos += static_cast<size_t>(length);
    };
    switch (wire) {
      case 0: read_varint(buf, pos, file); break;
      case 1: skip(8); break;
      case 2: {
        const uint64_t len = read_varint(buf, pos, file);
        payload = pos;
        skip(len);
        break;
      }
      case 5: skip(4); break;
      default: throw std::runtime_error(file + ": corrupt SentencePiece model (wire type " + std::to_string(wire) + ")");
    }
    if (pos > end) throw std::runtime_error(file + ": truncated SentencePiece model");
    visit(field, wire, field_begin, payload, pos);
  }
}

struct Rewritten {
  std::string proto;
  bool is_unigram = true;  // TrainerSpec.model_type defaults to UNIGRAM
  std::vector<int> piece_types;  // SentencePiece.type, NORMAL (1) by default
};

// Copies the ModelProto with NormalizerSpec replaced by {name: "identity",
// add_dummy_prefix: false, remove_extra_whitespaces: false} and without the
// self-test samples (they were produced with the original normalizer).
Rewritten rewrite_model(const std::string& buf, const std::string& file) {
  Rewritten r;
  for_each_field(buf, 0, buf.size(), file, [&](uint32_t field, uint32_t wire, size_t begin, size_t payload, size_t end) {
    if (field == 3 || field == 4) return;  // normalizer_spec, self_test_data
    if (field == 1 && wire == 2) {         // pieces: find piece (field 1) and type (field 3)
      int type = 1;
      std::string_view text;  // the last occurrence counts, as in protobuf
      for_each_field(buf, payload, end, file, [&](uint32_t f, uint32_t w, size_t, size_t p, size_t e) {
        if (f == 1 && w == 2) text = std::string_view(buf).substr(p, e - p);
        if (f == 3 && w == 0) {
          size_t q = p;
          type = static_cast<int>(read_varint(buf, q, file));
        }
      });
      // libsentencepiece's trie builder takes pieces as C strings and throws
      // through its C++ API on an empty one (also one that starts with NUL).
      if (text.empty() || text.find('\0') != std::string_view::npos)
        throw std::runtime_error(file + ": corrupt SentencePiece model: piece " + std::to_string(r.piece_types.size()) +
                                 " (at byte " + std::to_string(begin) + ") is " +
                                 (text.empty() ? "empty" : "not text (it holds a NUL byte)"));
      r.piece_types.push_back(type);
    }
    if (field == 2 && wire == 2) {         // trainer_spec: find model_type (field 3)
      for_each_field(buf, payload, end, file, [&](uint32_t f, uint32_t w, size_t, size_t p, size_t) {
        if (f == 3 && w == 0) {
          size_t q = p;
          r.is_unigram = read_varint(buf, q, file) == 1;
        }
      });
    }
    r.proto.append(buf, begin, end - begin);
  });
  std::string spec;
  spec.push_back(static_cast<char>((1 << 3) | 2));  // name
  write_varint(spec, 8);
  spec += "identity";
  spec.push_back(static_cast<char>(3 << 3));  // add_dummy_prefix = false
  spec.push_back(0);
  spec.push_back(static_cast<char>(4 << 3));  // remove_extra_whitespaces = false
  spec.push_back(0);
  r.proto.push_back(static_cast<char>((3 << 3) | 2));
  write_varint(r.proto, spec.size());
  r.proto += spec;
  return r;
}

}  // namespace


SentencePieceModel::SentencePieceModel(const std::filesystem::path& model_file)
    : file_(model_file.string()), cache_owner_(WordCache::new_owner()) {
  std::ifstream in(model_file, std::ios::binary);
  if (!in) throw std::runtime_error(file_ + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const Rewritten rewritten = rewrite_model(buffer.str(), file_);
  is_unigram_ = rewritten.is_unigram;

  processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = processor_->LoadFromSerializedProto({rewritten.proto.data(), rewritten.proto.size()});
  } catch (const std::exception& e) {  // parts of libsentencepiece (its trie builder) throw
    throw std::runtime_error(file_ + ": not a loadable SentencePiece model: " + e.what());
  }
  if (!status.ok()) throw std::runtime_error(file_ + ": not a loadable SentencePiece model: " + status.ToString());

  const int n = processor_->GetPieceSize();
  if (n != static_cast<int>(rewritten.piece_types.size())) {
    throw std::runtime_error(file_ + ": SentencePiece reports " + std::to_string(n) + " pieces, the file holds " +
                             std::to_string(rewritten.piece_types.size()));
  }
  pieces_.reserve(n);
  types_.reserve(n);
  for (int id = 0; id < n; ++id) {
    pieces_.push_back(processor_->IdToPiece(id));
    const int raw = rewritten.piece_types[id];
    const PieceType t = raw >= 1 && raw <= 6 ? static_cast<PieceType>(raw) : PieceType::kNormal;
    types_.push_back(t);
    ids_.emplace(pieces_.back(), id);
    if (t == PieceType::kByte) has_byte_pieces_ = true;
  }
  unk_id_ = processor_->unk_id();
  splits_at_spaces_ = true;
  for (const auto& p : pieces_) {
    if (crosses_metaspace_word(p)) splits_at_spaces_ = false;
  }
}

SentencePieceModel::~SentencePieceModel() = default;

void SentencePieceModel::tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (!splits_at_spaces_) {
    encode_chunk(piece, ids);
    return;
  }
  WordCache& cache = WordCache::for_thread(cache_owner_);
  for_each_metaspace_word(piece, [&](std::string_view word) {
    if (word.size() > WordCache::kMaxWordBytes || !cache.lookup(word, ids)) {
      const size_t start = ids.size();
      encode_chunk(word, ids);
      if (word.size() <= WordCache::kMaxWordBytes) cache.store(ids, start);
    }
  });
}

void SentencePieceModel::encode_chunk(std::string_view piece, std::vector<int32_t>& ids) const {
  thread_local std::vector<int> out;
  out.clear();
  const auto status = processor_->Encode({piece.data(), piece.size()}, &out);
  if (!status.ok()) throw std::runtime_error(file_ + ": SentencePiece encode failed: " + status.ToString());
  for (int id : out) {
    // transformers' converted BPE has no unk token: characters without a piece
    // (and without byte pieces to fall back to) are dropped.
    if (id == unk_id_ && !has_byte_pieces_) continue;
    ids.push_back(id);
  }
}

std::optional<int32_t> SentencePieceModel::token_to_id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* SentencePieceModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(pieces_.size())) return nullptr;
  return &pieces_[id];
}

}  // namespace fptrain::tokenizer
