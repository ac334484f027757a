// The CLI side of isa/io_rules.h: the validator every numeric option uses, and
// main's rule for anything thrown (one `error:` line, exit 1). Header-only: the
// libraries that declare options include CLI11 already; isa/ itself does not.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "isa/error.h"
#include "isa/io_rules.h"

namespace gpnpu::cli {

// `->check(cli::integer(1, 4096))`: a whole decimal integer in [lo, hi]; CLI11 runs it
// on the text before converting, so a value too large for the option's type is a
// range error ("--tokens: '99999999999999999999' is out of range: expected an integer
// from 1 to 4096"), not a conversion failure.
inline CLI::Validator integer(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        try {
          io::parse_integer(s, "", lo, hi);
        } catch (const Error& e) {
          if (lo == INT64_MIN && hi == INT64_MAX) return "'" + s + "' is not a whole number";
          return e.what();
        }
        return {};
      },
      // (no range in the help where the option's own check sets it)
      lo == INT64_MIN && hi == INT64_MAX ? std::string() : "INT " + std::to_string(lo) + ".." + std::to_string(hi));
}

// Prints `error: MESSAGE` as one line: control characters (a newline, a NUL from a
// file name or a library's message) are shown escaped, never cut or split.
inline void print_error(const std::string& msg) {
  std::string line;
  for (char c : msg) {
    const auto b = static_cast<unsigned char>(c);
    if (b == '\n') line += " | ";
    else if (b < 0x20 || b == 0x7f) line += "\\x" + std::string(1, "0123456789abcdef"[b >> 4]) + "0123456789abcdef"[b & 15];
    else line += c;
  }
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", line.c_str());
}

// Runs app.parse: help and version print and exit 0; CLI::RuntimeError(N) exits N
// (describe's gate failure: 2); every other parse error, gpnpu::Error or exception
// is one `error:` line and exit 1, never an abort.
inline int run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (run with --help for the options)");
    return 1;
  } catch (const Error& e) {
    print_error(e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    print_error("out of memory (std::bad_alloc): the input is larger than this machine can hold; check its size");
    return 1;
  } catch (const std::exception& e) {
    print_error(std::string("internal error: ") + e.what() + " (please report it with the command line)");
    return 1;
  } catch (...) {
    print_error("internal error: an unknown exception (please report it with the command line)");
    return 1;
  }
  return 0;
}

}  // namespace gpnpu::cli
