{-# LANGUAGE DataKinds, NoImplicitPrelude, TemplateHaskell #-}
{-|
Negative control for the loop check of tests/test_blocks.py: 'branches' whose branches do NOT
end in a fifo (breaking its precondition) makes a combinational loop, which
Verilator must report. If it does not, the check proves nothing.
-}
module LoopTop where

import Clash.Prelude

import K2C.Branch (branches)
import K2C.Stream (mapS)
import TopPorts (ports)

loopTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Unsigned 8)) -> Signal System Bool
  -> (Signal System (Maybe (Unsigned 8, Unsigned 8)), Signal System Bool)
loopTop clk rst en input readyOut =
  withClockResetEnable clk rst en (branches (mapS id) (mapS (+ 1))) (input, readyOut)
{-# NOINLINE loopTop #-}
{-# ANN loopTop (ports "loop_top") #-}
