#include "launcher/line_prefixer.h"

#include <utility>

namespace c10d::inline v1::launcher {

LinePrefixer::LinePrefixer(std::string prefix, std::size_t max_line_bytes)
    : prefix_(std::move(prefix)), max_line_bytes_(max_line_bytes == 0 ? 1 : max_line_bytes) {}

void LinePrefixer::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    const std::size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(data);
      if (partial_.size() > max_line_bytes_) {
        // Emit the whole pieces and keep the rest (at least one byte) waiting: a line of
        // exactly the limit, whose '\n' comes next, stays one line.
        const std::size_t keep = (partial_.size() - 1) % max_line_bytes_ + 1;
        emit(std::string_view(partial_).substr(0, partial_.size() - keep), out);
        partial_.erase(0, partial_.size() - keep);
      }
      return;
    }
    if (partial_.empty()) {
      emit(data.substr(0, newline), out);
    } else {
      partial_.append(data.substr(0, newline));
      emit(partial_, out);
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
}

void LinePrefixer::finish(std::string& out) {
  if (partial_.empty()) return;
  emit(partial_, out);
  partial_.clear();
}

void LinePrefixer::emit(std::string_view line, std::string& out) const {
  do {
    const std::string_view piece = line.substr(0, max_line_bytes_);
    out.append(prefix_).append(piece).push_back('\n');
    line.remove_prefix(piece.size());
  } while (!line.empty());
}

}  // namespace c10d::inline v1::launcher
