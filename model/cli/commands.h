// Subcommands of the gpnpu CLI that live in the model library. Each area defines
// its own function in its own file; sim/main.cpp calls them all.
#pragma once
#include <CLI/CLI.hpp>

namespace gpnpu::model {

void add_checkpoint_commands(CLI::App& app);  // make-checkpoint, quantize (model/cli/checkpoint_cli.cpp)
void add_tokenizer_commands(CLI::App& app);   // tokenize, detokenize (model/cli/tokenizer_cli.cpp)
void add_image_commands(CLI::App& app);       // preprocess (model/cli/image_cli.cpp)

}  // namespace gpnpu::model
