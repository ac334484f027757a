// A list scheduler for straight-line kernel code: it reorders the instructions of a
// region (no labels, branches or DMA inside) so that in-order issue stalls less, keeping
// every dependency of the emitted order: registers (read after write, write after read
// and after write; predicates included) and memory (an LRM store stays ordered with
// every LRM access around it, an OCM store with every OCM access). Values are therefore exactly those of the
// emitted order; only the cycles change.
//
// It simulates the issue rule of docs/architecture.md ("Issue"; sim::Timing::cost_of
// for each instruction's latency, occupancy and resource): at each step it takes, of
// the instructions whose predecessors are placed, the one that can issue first, and of
// those the one with the longest latency path to the end of the region. Registers are
// taken as ready at the region's start. Per-PE OCM forms are costed with every PE on.
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

// Reorders the builder's words from `begin` to its end; returns the cycles the region
// takes from its first issue to its last result (registers ready at the start).
// `ocm_disjoint`: the caller guarantees that no OCM load of the region reads bytes an
// OCM store of the region writes, so OCM loads and stores need not stay ordered (stores
// among themselves and every LRM access still do).
uint64_t schedule_region(Builder& b, uint32_t begin, const sim::Config& cfg, bool ocm_disjoint = false);

}  // namespace gpnpu::kernels
