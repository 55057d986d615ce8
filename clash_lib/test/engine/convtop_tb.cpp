// Verilator harness for ConvTop.hs (tests/test_blocks.py builds and runs it): drives the case file
// convtop.in (Driver.hs format: "count pattern", then "gap raw..." per pixel)
// through the generated Verilog and prints the trace lines "A t" (an input
// beat moved) and "O t raws" (an output beat moved), cycles counted from the
// first cycle after a one-cycle reset, exactly as Driver.hs does.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include "Vconvtop.h"
#include "verilated.h"

static const int C = 2, F = 3, W = 16;   // channels in, filters out, bits per value

int main(int argc, char **argv) {
  Verilated::commandArgs(argc, argv);
  std::ifstream in(argv[1]);
  int count; std::string pattern, line;
  in >> count >> pattern; std::getline(in, line);
  std::vector<std::vector<long long>> items;   // empty vector = idle cycle
  while (std::getline(in, line)) {
    std::istringstream ls(line); long long gap, v; ls >> gap;
    for (long long g = 0; g < gap; ++g) items.push_back({});
    std::vector<long long> px; while (ls >> v) px.push_back(v);
    items.push_back(px);
  }
  Vconvtop top;
  top.en = 1; top.clk = 0;
  size_t pos = 0; int outputs = 0;
  for (long long t = -1; outputs < count && t < 200000; ++t) {
    bool ready_out = t < 0 || t >= (long long)pattern.size() || pattern == "-" ? true
                     : pattern[t] == '1';
    top.rst = t < 0;
    bool valid = t >= 0 && pos < items.size() && !items[pos].empty();
    uint64_t data = 0;
    if (valid)
      for (int c = 0; c < C; ++c)
        data = (data << W) | ((uint64_t)items[pos][c] & ((1ull << W) - 1));
    top.in_data = ((uint64_t)valid << (C * W)) | data;
    top.out_ready = ready_out;
    top.clk = 0; top.eval();
    if (t >= 0) {
      if (valid && top.in_ready) printf("A %lld\n", t);
      uint64_t out = top.out_data;
      if ((out >> (F * W)) & 1 && ready_out) {
        printf("O %lld", t);
        for (int f = 0; f < F; ++f) {
          int64_t raw = (out >> ((F - 1 - f) * W)) & ((1ull << W) - 1);
          if (raw >= (1ll << (W - 1))) raw -= (1ll << W);
          printf(" %lld", (long long)raw);
        }
        printf("\n");
        ++outputs;
      }
      if (pos < items.size() && (items[pos].empty() || top.in_ready)) ++pos;
    }
    top.clk = 1; top.eval();
  }
  return outputs == count ? 0 : 1;
}
