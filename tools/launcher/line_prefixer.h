// LinePrefixer: cuts one output stream of a child into lines and prefixes each with the
// child's tag ("[rank 3]: "), so the launcher can merge the streams of many children without
// splitting a line.
//
// Bytes go in as they arrive, in pieces of any size; whole lines come out, each ending in
// '\n'. The bytes after the last '\n' wait for the rest of their line, or for finish() at the
// end of the stream, which ends them with a '\n'. A line longer than the limit is cut into
// pieces of the limit, each prefixed, so a child that never prints a newline cannot make the
// launcher hold unbounded memory.
//
// Not thread-safe: one per stream, used by the launcher's one thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace c10d::inline v1::launcher {

class LinePrefixer {
 public:
  static constexpr std::size_t kDefaultMaxLineBytes = 64 * 1024;

  explicit LinePrefixer(std::string prefix, std::size_t max_line_bytes = kDefaultMaxLineBytes);

  // Takes the next bytes of the stream; appends every line they complete to `out`.
  void feed(std::string_view data, std::string& out);
  // At the end of the stream: appends the unfinished last line, if any, with a '\n'.
  void finish(std::string& out);

  const std::string& prefix() const { return prefix_; }

 private:
  // Appends `line` (without its '\n'), prefixed, cut into pieces of at most max_line_bytes_.
  void emit(std::string_view line, std::string& out) const;

  std::string prefix_;
  std::size_t max_line_bytes_;
  std::string partial_;  // the bytes after the last '\n', at most max_line_bytes_
};

}  // namespace c10d::inline v1::launcher
