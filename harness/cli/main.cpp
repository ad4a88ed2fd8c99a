// The `coldstart` command.
//
//   coldstart replay SCENARIO... [--strategy NAME]... [--filter REGEX] [--repeat N]
//                    [--device auto|cuda|compile-only] [--arch sm_XX] [--set KEY=VALUE]...
//                    [--json FILE] [--junit FILE] [--md FILE] [--html FILE] [--trace FILE]
//                    [--cache-dir DIR] [--jit-monitor record|warn|error] [--timeout S]
//                    [--no-isolate] [--progress auto|live|plain|none] [-v]
//   coldstart coverage SCENARIO... [--strategy NAME]... [--target GPU | --arch sm_XX]
//                      [--json FILE] [--md FILE] ...  (the serving envelope, compile-only)
//   coldstart report RESULTS.json... [--junit FILE] [--md FILE] [--html FILE] [--trace FILE]
//   coldstart compare BASELINE.json CURRENT.json [--max-regression PCT] [--allow-removed]
//                     [--gate-cross-target] [--md FILE]
//   coldstart merge RESULTS.json... -o MERGED.json
//   coldstart list [SCENARIO...] [--filter REGEX]
//   coldstart doctor
//
// The parent process never touches the GPU: it validates the scenario, then starts one child per
// (variant, strategy) (`coldstart _child --job FILE`, the same binary) with the job it validated
// (harness/cli/child_job.h: the variant's scenario, the strategy, the options), collects what
// each child reports (harness/isolate), and renders the results. The tuned-config directories the
// children read are copies the parent made when it validated them (harness/cli/run_inputs.h).
// Exit status: 0 when every strategy ran (a reproduced crash or timeout is a result), 1 when the
// harness failed for some strategy (outcome "error") or every strategy run timed out, 2 on bad
// input, 3 with --check when an expect: rule is unmet, 128 + the signal (130 for SIGINT, 143 for
// SIGTERM, 129 for SIGHUP) when interrupted. README.md has the details.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "harness/cli/bench_report.h"
#include "harness/cli/compare.h"
#include "harness/cli/doctor.h"
#include "harness/cli/replay_options.h"
#include "harness/cli/version.h"
#include "harness/common/error.h"
#include "reports/render_util.h"

int main(int argc, char** argv) {
  using namespace coldstart;
  using cli::ReplayArgs;
  std::string cmdline;
  for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"coldstart: replays an LLM server's startup and first request against "
               "runtime-compiled CUDA kernels, per warmup strategy"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(cli::kVersion) + " (" + cli::git_sha() + ")");

  ReplayArgs ra;
  CLI::App* replay = app.add_subcommand("replay", "replay scenarios for each strategy");
  cli::add_run_options(replay, ra);
  replay->add_option("--repeat", ra.repeat,
                     "run each strategy N times; keep median, min and max")->capture_default_str();
  replay->add_flag("--check", ra.check,
                   "exit 3 when a scenario's expect: rules are not met by this run (the rules "
                   "are always checked and printed)");
  replay->add_flag("--envelope", ra.envelope,
                   "compile-only: after startup, one key-only step of each class of the serving "
                   "envelope instead of the requests (what `coldstart coverage` runs); each "
                   "result's envelope field lists the keys they reach that startup left cold");
  replay->add_flag("--no-isolate", ra.no_isolate,
                   "run strategies in this process (debugging; a crash ends the run)");

  ReplayArgs ca;
  CLI::App* coverage = app.add_subcommand(
      "coverage", "every kernel key each scenario's server can reach (its serving envelope), "
                  "which each strategy compiles at startup and which it leaves cold; "
                  "compile-only");
  cli::add_run_options(coverage, ca);  // each result's envelope field holds the coverage
  // Coverage steps are key-only: it runs no kernel, so --device takes compile-only (or auto,
  // which it reads the same way) and refuses cuda.
  coverage->get_option("--device")->description(
      "compile-only (the default here; coverage runs no kernel, so cuda is refused)");

  std::string child_job_file;
  CLI::App* child = app.add_subcommand("_child", "internal: one strategy's job, reporting on fd 3");
  child->group("");  // hidden
  child->add_option("--job", child_job_file, "the job file the parent wrote")->required();

  ReplayArgs ja;
  CLI::App* job = app.add_subcommand(
      "_job", "debugging: print the job a replay would hand one strategy's child (JSON), to run "
              "it alone with `_child --job FILE`");
  job->group("");  // hidden
  job->add_option("scenario", ja.scenario)->required();
  cli::add_common_options(job, ja);
  job->add_option("--strategy", ja.strategy_name)->required();
  job->add_option("--variant-index", ja.variant_index)->capture_default_str();
  job->add_option("--compile-memo", ja.compile_memo);

  ReplayArgs rep;
  std::vector<std::string> report_inputs;
  CLI::App* report = app.add_subcommand("report", "render results files (single-run or merged)");
  report->add_option("results", report_inputs, "results JSON files")->required();
  cli::add_report_options(report, rep);
  rep.jit_monitor = "record";
  report->add_option("--jit-monitor", rep.jit_monitor,
                     "error: count hot-path compiles as JUnit failures")->capture_default_str();

  std::vector<std::string> list_files;
  std::string list_filter;
  CLI::App* list = app.add_subcommand("list", "list warmers, scenarios and their strategies");
  list->add_option("scenarios", list_files, "scenario files (default: scenarios/*.yaml)");
  list->add_option("--filter", list_filter, "only names matching this regular expression")
      ->envname("COLDSTART_FILTER");

  std::string cmp_base, cmp_cur;
  double cmp_pct = 10.0;
  CLI::App* compare = app.add_subcommand("compare", "compare two results files; exit 1 on a regression");
  compare->add_option("baseline", cmp_base, "baseline results file (single-run or merged)")->required();
  compare->add_option("current", cmp_cur, "current results file (single-run or merged)")->required();
  compare->add_option("--max-regression", cmp_pct,
                      "percent a timing may grow (beyond the run-to-run spread) before it fails")
      ->envname("COLDSTART_MAX_REGRESSION")->capture_default_str()->check(CLI::Range(0.0, 1e6));
  std::string cmp_md;
  compare->add_option("--md", cmp_md,
                      "also write the report as Markdown (a pull-request comment) to this file");
  bool cmp_allow_removed = false;
  compare->add_flag("--allow-removed", cmp_allow_removed,
                    "do not fail when baseline strategy results are missing from the current "
                    "file or were interrupted there");
  bool cmp_gate_cross = false;
  compare->add_flag("--gate-cross-target", cmp_gate_cross,
                    "against a baseline from another GPU or --target profile, also fail on new "
                    "crashes and hot-path compiles (by default listed as differences)");
  bool cmp_force = false;
  compare->add_flag("--force", cmp_force,
                    "let --md replace a symbolic link, device, FIFO or socket (refused otherwise)");

  std::vector<std::string> merge_in;
  std::string merge_out;
  CLI::App* merge = app.add_subcommand("merge", "fold results files from several machines into one");
  merge->add_option("inputs", merge_in, "results files (single-run or merged)")->required();
  merge->add_option("-o,--output", merge_out, "merged results file to write")->required();
  bool merge_force = false;
  merge->add_flag("--force", merge_force,
                  "let -o replace a symbolic link, device, FIFO or socket (refused otherwise)");

  std::vector<std::string> bench_in, bench_base;
  std::string bench_md;
  CLI::App* bench = app.add_subcommand(
      "bench-report", "one table of the kernel benchmarks' rates against the device's ceilings");
  bench->add_option("inputs", bench_in,
                    "bench JSON files (--benchmark_out of bench/*_bench) or directories of them")
      ->required();
  bench->add_option("--baseline", bench_base,
                    "the same benches from before (files or directories): adds time and speed-up");
  bench->add_option("--md", bench_md, "also write the report (Markdown) to this file");

  CLI::App* doctor =
      app.add_subcommand("doctor", "show driver, GPU, versions; check NVRTC, driver load, CUDA graphs");

  // Command-line errors read like every other error of the tool ("coldstart: ...").
  // CLI11 2.1 (Debian 12) reads the environment variables of every subcommand without a
  // parse-complete callback, parsed or not: COLDSTART_JOBS=abc broke `coldstart list`. With one,
  // a subcommand reads its variables only when it is the command run.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    sub->parse_complete_callback([] {});
  // A bad value that came from an environment variable (COLDSTART_JOBS=abc) is named by its
  // variable too: CLI11 and our checks name only the option, which the user may never have typed.
  // Returns `message` with, at the end of its first line, the variable and value of each option
  // of `a` or of the command run that the message names by its long name and whose value came
  // from its variable, not from the command line.
  auto name_environment = [argc, argv](const CLI::App* a, std::string message) {
    std::vector<const CLI::Option*> options = a->get_options();
    for (const CLI::App* sub : a->get_subcommands())  // the command being run
      for (const CLI::Option* opt : sub->get_options()) options.push_back(opt);
    for (const CLI::Option* opt : options) {
      const std::string& env = opt->get_envname();
      const char* value = env.empty() ? nullptr : std::getenv(env.c_str());
      if (value == nullptr || opt->get_lnames().empty() ||
          message.find("--" + opt->get_lnames().front()) == std::string::npos)
        continue;
      bool typed = false;
      for (int i = 1; i < argc && !typed; ++i) {
        const std::string arg = argv[i];
        for (const std::string& n : opt->get_lnames())
          typed = typed || arg == "--" + n || arg.rfind("--" + n + "=", 0) == 0;
        for (const std::string& n : opt->get_snames())
          typed = typed || arg.rfind("-" + n, 0) == 0;
      }
      if (!typed && message.find(env) == std::string::npos)
        message.insert(std::min(message.find('\n'), message.size()),
                       " (the value comes from the environment: " + env + "='" +
                           reports::detail::terminal_text(value, true) + "')");
    }
    return message;
  };
  app.failure_message([name_environment](const CLI::App* a, const CLI::Error& e) {
    return name_environment(a, "coldstart: " + CLI::FailureMessage::simple(a, e));
  });
  // A first word that is no command, or an option other than --help / --version before the
  // command: CLI11 would only say that a subcommand is required.
  if (argc >= 2) {
    const std::string first = argv[1];
    const bool option = !first.empty() && first[0] == '-';
    const bool top_level_flag = first == "-h" || first == "--help" || first == "--version";
    const bool command = !app.get_subcommands([&](CLI::App* sub) {
                            return sub->get_name() == first;
                          }).empty();
    if ((option && !top_level_flag) || (!option && !command)) {
      std::string known;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_group().empty(); }))
        known += (known.empty() ? "" : ", ") + sub->get_name();
      std::cerr << "coldstart: " << (option ? "unknown option '" : "unknown command '")
                << reports::detail::terminal_text(first, true) << "'"
                << (option ? " before the command (coldstart COMMAND [OPTIONS]; " : " (")
                << "commands: " << known << "; see --help)\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*replay) return cli::replay_main(ra, cmdline);
    if (*coverage) return cli::coverage_main(ca, cmdline);
    if (*child) return cli::child_main(child_job_file);
    if (*job) return cli::job_main(ja);
    if (*report) return cli::report_main(report_inputs, rep);
    if (*list) return cli::list_main(list_files, list_filter);
    if (*compare)
      return cli::compare_main(cmp_base, cmp_cur, cmp_pct, cmp_allow_removed, cmp_md, cmp_force,
                               cmp_gate_cross);
    if (*merge) return cli::merge_main(merge_in, merge_out, merge_force);
    if (*bench) return cli::bench_report_main(bench_in, bench_base, bench_md);
    if (*doctor) return cli::doctor_main();
  } catch (const InputError& e) {
    // Messages quote file names, keys and bytes from the user's files: escape what a terminal
    // would act on (ESC, CR, invalid UTF-8). An option's value checked here may have come from
    // its environment variable: the message then says so.
    std::cerr << "coldstart: "
              << name_environment(&app, reports::detail::terminal_text(e.what(), true)) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "coldstart: error: " << reports::detail::terminal_text(e.what(), true) << "\n";
    return 1;
  }
  return 0;
}

