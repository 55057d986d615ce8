// Verilator harness for clash_lib/example (tests/test_blocks.py builds and runs it): feeds input.txt (Sim
// protocol) to the AXI4-Stream ports back to back with m_axis_tready high and
// prints "accept_cycle output_cycle class raw..." per sample, as K2C.Sim does,
// so the output must equal example/expected.txt.
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iostream>
#include <vector>
#include "Vnetwork.h"
#include "verilated.h"

static const int N_IN = 4, N_OUT = 3, W = 16, CLASS_BITS = 2;

int main(int argc, char **argv) {
  Verilated::commandArgs(argc, argv);
  int n; std::cin >> n;
  std::vector<std::vector<long long>> samples(n, std::vector<long long>(N_IN));
  for (auto &s : samples) for (auto &v : s) std::cin >> v;
  Vnetwork top;
  top.en = 1; top.clk = 0;
  size_t next = 0; int printed = 0; std::deque<long long> accepts;
  for (long long t = -1; printed < n && t < 100000; ++t) {
    top.rst = t < 0;
    bool valid = t >= 0 && next < samples.size();
    uint64_t data = 0;
    if (valid)
      for (int i = N_IN - 1; i >= 0; --i)   // element 0 in the lowest bits
        data = (data << W) | ((uint64_t)samples[next][i] & ((1ull << W) - 1));
    top.s_axis_tdata = data; top.s_axis_tvalid = valid; top.s_axis_tlast = 1;
    top.m_axis_tready = 1;
    top.clk = 0; top.eval();
    if (t >= 0) {
      if (valid && top.s_axis_tready) { accepts.push_back(t); ++next; }
      if (top.m_axis_tvalid) {
        uint64_t out = top.m_axis_tdata;
        printf("%lld %lld %llu", accepts.front(), t,
               (unsigned long long)(out >> (N_OUT * W)) & ((1ull << CLASS_BITS) - 1));
        accepts.pop_front();
        for (int j = 0; j < N_OUT; ++j) {
          int64_t raw = (out >> (j * W)) & ((1ull << W) - 1);
          if (raw >= (1ll << (W - 1))) raw -= (1ll << W);
          printf(" %lld", (long long)raw);
        }
        printf("\n");
        ++printed;
      }
    }
    top.clk = 1; top.eval();
  }
  return printed == n ? 0 : 1;
}
