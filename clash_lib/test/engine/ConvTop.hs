{-# LANGUAGE DataKinds, NoImplicitPrelude, TypeApplications, TemplateHaskell #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A small conv2d top entity for the HDL checks of tests/test_blocks.py (clash --verilog,
verilator --lint-only, and a Verilator run compared with reference.py).
Its geometry must match the case @convtop@ in reference.py: a 6x5x2 image,
3x2 kernels, strides (1, 2), 3 filters, p = 2, b = 4 (ch = 3, G = 2), one
adder level per pipeline stage (l = 1: D = 4), format
1,7,8, exact accumulator 1,19,16 (ci = 8 + 8 + ceil(log2(13)) + 1), relu.
The weight file @convtop.mem@ is read from clash's working directory.

Ports: @in_data@ (valid bit on top, then channel 0), @out_ready@ in;
@out_data@ (valid bit on top, then filter 0), @in_ready@ out.
-}
module ConvTop where

import Clash.Prelude

import K2C.Activation (Finish (..), relu, requantize)
import K2C.Conv (conv2d, direct)
import K2C.Memory (WeightRom (..))

type Act = SFixed 8 8

weights :: WeightRom 8 2 3 Act Act
weights = WeightRom "convtop.mem"

topEntity
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Act))
  -> Signal System Bool
  -> (Signal System (Maybe (Vec 3 Act)), Signal System Bool)
topEntity clk rst en input readyOut =
  withClockResetEnable clk rst en
    (conv2d (SNat @6) (SNat @5) (SNat @3) (SNat @2) (SNat @1) (SNat @2)
            (SNat @2) (SNat @4) (SNat @1) direct weights finish)
    (input, readyOut)
  where
    finish :: Finish 0 (SFixed 21 16) Act
    finish = Finish requantize relu
{-# NOINLINE topEntity #-}
{-# ANN topEntity
  (Synthesize
    { t_name   = "convtop"
    , t_inputs = [ PortName "clk", PortName "rst", PortName "en"
                 , PortName "in_data", PortName "out_ready" ]
    , t_output = PortProduct "" [PortName "out_data", PortName "in_ready"]
    }) #-}
