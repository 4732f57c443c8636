// Fuzz target yaml_config: a training configuration file. Parsing and the
// cross-field checks (what `fptrain train` runs) must give a TrainConfig or
// std::invalid_argument naming the file, line and key (the CLI exits 2 with
// it); an accepted configuration must survive to_yaml (what checkpoints keep)
// and be read back to the same text.
#include "fuzz/fuzz_util.h"
#include "trainer/config.h"

#include <cstdio>
#include <cstdlib>

using namespace fptrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainer::TrainConfig config;
  try {
    config = trainer::parse_config(std::string(fuzz::as_text(data, size)), "fuzz.yaml");
    trainer::validate(config);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string text = trainer::to_yaml(config);
  try {
    const trainer::TrainConfig back = trainer::parse_config(text, "written back");
    trainer::validate(back);
    const std::string again = trainer::to_yaml(back);
    if (again != text) {
      std::fprintf(stderr, "yaml_config: to_yaml is not stable:\n%s\n---\n%s\n", text.c_str(), again.c_str());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "yaml_config: an accepted configuration does not read back: %s\n%s\n", e.what(), text.c_str());
    std::abort();
  }
  return 0;
}
