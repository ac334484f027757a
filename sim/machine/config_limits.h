// The allowed values of the machine's config keys, as `gpnpu config --list` shows
// them; Config::validate checks the same table (kLimits in sim/machine/config.cpp).
#pragma once
#include <string>

namespace gpnpu::sim {

// "1..256", "(0, 100]", "4KiB..256MiB, x64", ">= 1", or ">= 0" / "any" for a key
// without limits; "" for an unknown key.
std::string param_allowed(const std::string& key);

}  // namespace gpnpu::sim
