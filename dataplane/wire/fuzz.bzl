"""Fuzz targets that run under libFuzzer and as plain corpus-replay tests."""

load("@rules_cc//cc:defs.bzl", "cc_test")
load("//:copts.bzl", "RDMAPLANE_TEST_COPTS")

def rdmaplane_fuzzer(
        name,
        srcs,
        corpus,
        deps = [],
        tags = [],
        copts = RDMAPLANE_TEST_COPTS,
        **kwargs):
    """One fuzz entry point (LLVMFuzzerTestOneInput) and its corpus.

    Under --config=fuzz (clang, see .bazelrc) the target links libFuzzer's
    main: deploy/fuzz.sh runs it as a coverage-guided campaign over
    `corpus`. Otherwise it links //dataplane/wire:fuzz_driver and, as a
    test, replays every file of `corpus` once (a regression test of the
    checked-in inputs, crashes found earlier among them). The sources also
    define rdmaplane::wire::FuzzSeedCorpus (fuzz_driver.h).

    Args:
      name: the target.
      srcs: the entry point's sources.
      corpus: folder of inputs, relative to the package.
      deps: what the entry point needs.
      tags: test tags.
      copts: compiler flags.
      **kwargs: passed on to cc_test.
    """
    cc_test(
        name = name,
        size = "small",
        srcs = srcs,
        copts = copts,
        args = ["%s/%s" % (native.package_name(), corpus)],
        data = native.glob([corpus + "/*"]),
        linkopts = select({
            "//dataplane/wire:libfuzzer": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + ["//dataplane/wire:fuzz_entry"] + select({
            "//dataplane/wire:libfuzzer": [],
            "//conditions:default": ["//dataplane/wire:fuzz_driver"],
        }),
        tags = tags + ["fuzzer"],
        **kwargs
    )
