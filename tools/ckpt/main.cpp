// ckpt: inspect, verify, compare and convert safetensors checkpoints, and prune a run folder's
// damaged steps (tools/README.md).

#include "common.hpp"

#include <ckpt/version.hpp>

#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"Inspect, verify, compare and convert safetensors checkpoints (single files, sharded\n"
               "checkpoints and checkpoint_manager folders); prune the steps a manager set aside as damaged.\n\n"
               "Exit status: 0 on success, 1 when verify or diff finds something, 2 on a usage or I/O\n"
               "error.",
               "ckpt"};
  app.set_version_flag("--version", "ckpt " CKPT_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Run 'ckpt SUBCOMMAND --help' for the options of a subcommand.");

  ckpt_tool::action chosen;
  ckpt_tool::add_inspect(app, chosen);
  ckpt_tool::add_verify(app, chosen);
  ckpt_tool::add_diff(app, chosen);
  ckpt_tool::add_convert(app, chosen);
  ckpt_tool::add_prune(app, chosen);

  // `ckpt` alone: its help, as `ckpt --help` prints it (the subcommands and what they do), on
  // stdout; and, since nothing was done, the usage-error status with CLI11's one line on stderr.
  if (argc <= 1) {
    std::cout << app.help() << std::flush;
    std::cerr << "A subcommand is required\n";
    return ckpt_tool::failure;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the help or the error; every usage error is status 2, whatever CLI11's code.
    return app.exit(e) == 0 ? ckpt_tool::success : ckpt_tool::failure;
  }
  const int status = ckpt_tool::guarded(chosen);
  std::cout.flush();
  return std::cout ? status : ckpt_tool::failure;
}
