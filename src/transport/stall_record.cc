#include "transport/stall_record.h"

#include <fmt/format.h>

#include <charconv>

#include "core/parse.h"

namespace c10d::inline v1::transport {
namespace {

// Reads a decimal int (an optional '-') at the front of `text` and the one space after it.
bool take_int(std::string_view& text, int& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  if (ec != std::errc() || end == text.data() + text.size() || *end != ' ') return false;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()) + 1);
  return true;
}

}  // namespace

std::string stall_doing(std::string_view text) {
  // Whoever can write the store can write it, and it is printed: bounded, printable.
  return core::printable(text, kMaxStallDoingBytes);
}

std::string encode_stall_record(const StallRecord& record) {
  std::string doing = record.doing;
  for (char& c : doing) {
    if (c == '\n') c = ' ';
  }
  return fmt::format("{} {} {} {}\n", record.rank, record.awaited, record.suspect, doing);
}

std::vector<StallRecord> decode_stall_records(std::string_view text, int world_size) {
  std::vector<StallRecord> records;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    StallRecord r;
    if (take_int(line, r.rank) && take_int(line, r.awaited) && take_int(line, r.suspect) &&
        r.rank >= 0 && r.rank < world_size && r.awaited >= 0 && r.awaited < world_size &&
        r.suspect >= -1 && r.suspect < world_size) {
      r.doing = stall_doing(line);
      records.push_back(std::move(r));
    }
  }
  return records;
}

}  // namespace c10d::inline v1::transport
