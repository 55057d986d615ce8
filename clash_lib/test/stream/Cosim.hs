{-# LANGUAGE DataKinds, NoImplicitPrelude, RankNTypes, ScopedTypeVariables,
             FlexibleContexts, TypeApplications, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Cycle-exact co-simulation vectors for the tops of "Tops": runs each top in
the Clash simulation with random input (idle gaps, downstream stalls) and
writes, per top, a Verilog testbench plus its stimulus and expected-response
files. The testbench replays the stimulus into the generated Verilog and
compares, every cycle, @in_ready@ and (when valid) @out_data@.

@cabal test stream --test-option=--vectors --test-option=DIR@ writes them
(tb_<top>.v, <top>.in, <top>.expect) into DIR; tests/test_blocks.py then
replays each in Icarus on Clash's Verilog of the top:

> iverilog -o sim tb_window_top.v <hdl>/Tops.windowTop/window_top.v && vvp -n sim
-}
module Cosim (writeVectors) where

import Clash.Prelude hiding (split)
import qualified Prelude as P
import System.Random (StdGen, mkStdGen, randomRs, split)

import Harness (Traffic (..), gapsFor, readyFor, source)
import Tops

-- | Cycles simulated per top.
cycles :: Int
cycles = 3000

-- | Write every top's testbench and vectors into @dir@.
writeVectors :: FilePath -> IO ()
writeVectors dir = do
  vectors dir "window_top" windowTop (mkStdGen 1)
  vectors dir "window_column_top" windowColumnTop (mkStdGen 2)
  vectors dir "window_row_top" windowRowTop (mkStdGen 3)
  vectors dir "pad_window_top" padWindowTop (mkStdGen 4)
  vectors dir "max_pool_top" maxPoolTop (mkStdGen 5)
  vectors dir "avg_pool_shift_top" avgPoolShiftTop (mkStdGen 6)
  vectors dir "avg_pool_divide_top" avgPoolDivideTop (mkStdGen 7)
  vectors dir "collect_top" collectTop (mkStdGen 8)
  vectors dir "pad_columns_top" padColumnsTop (mkStdGen 9)

type Top a b
  =  Clock System -> Reset System -> Enable System
  -> Signal System (Maybe a) -> Signal System Bool
  -> (Signal System (Maybe b), Signal System Bool)

-- | Simulate a top on random beats and write its vectors.
vectors
  :: forall a b . (BitPack a, BitPack b, NFDataX a, NFDataX b)
  => FilePath -> String -> Top a b -> StdGen -> IO ()
vectors dir name top gen = do
  P.writeFile (dir P.++ "/" P.++ name P.++ ".in") (P.unlines (P.map stimulus rows))
  P.writeFile (dir P.++ "/" P.++ name P.++ ".expect") (P.unlines (P.map response rows))
  P.writeFile (dir P.++ "/tb_" P.++ name P.++ ".v")
              (testbench name (widthOf @(Maybe a)) (widthOf @(Maybe b)))
  where
    (g1, rest) = split gen
    (g2, g3) = split rest
    traffic = Traffic "cosim" 30 40
    beats = P.map (unpack . fromInteger) (randomRs (0, 2 P.^ widthOf @a - 1 :: Integer) g3) :: [a]
    readyOut = fromList (False : readyFor traffic g2)
    (output, readyIn) = top clockGen resetGen enableGen input readyOut
    input = source (gapsFor traffic g1) beats readyIn
    rows = P.take cycles (sample (bundle (input, readyOut, output, readyIn)))
    stimulus (i, r, _, _) = bits (pack i) P.++ bits (pack r)
    response (_, _, o, r) = bits (pack o) P.++ bits (pack r)

widthOf :: forall t . BitPack t => Int
widthOf = natToNum @(BitSize t)

-- | Bits MSB first, undefined bits as @x@ (from Clash's 'show': @0b1_0.01@,
-- @.@ marking an undefined bit).
bits :: KnownNat n => BitVector n -> String
bits = P.map undefinedAsX . P.filter (`P.elem` "01.") . P.drop 2 . P.show
  where
    undefinedAsX '.' = 'x'
    undefinedAsX b   = b

-- | A testbench that replays @name.in@ and checks against @name.expect@.
testbench :: String -> Int -> Int -> String
testbench name inBits outBits = P.unlines
  [ "`timescale 100fs/100fs"
  , "module tb;"
  , "  reg clk = 0, rst = 1;"
  , "  reg [" P.++ show (inBits + 1) P.++ "-1:0] stim [0:" P.++ show cycles P.++ "-1];"
  , "  reg [" P.++ show (outBits + 1) P.++ "-1:0] expect [0:" P.++ show cycles P.++ "-1];"
  , "  reg [" P.++ show (inBits + 1) P.++ "-1:0] s;"
  , "  wire [" P.++ show outBits P.++ "-1:0] out_data;"
  , "  wire in_ready;"
  , "  integer t, errors = 0, moved = 0;"
  , "  " P.++ name P.++ " dut (.clk(clk), .rst(rst), .en(1'b1), .in_data(s[" P.++ show inBits
      P.++ ":1]), .out_ready(s[0]), .out_data(out_data), .in_ready(in_ready));"
  , "  initial begin"
  , "    $readmemb(\"" P.++ name P.++ ".in\", stim);"
  , "    $readmemb(\"" P.++ name P.++ ".expect\", expect);"
  , "    for (t = 0; t < " P.++ show cycles P.++ "; t = t + 1) begin"
  , "      s = stim[t]; rst = (t == 0);"
  , "      #5;"
  , "      if (in_ready !== expect[t][0]) begin errors = errors + 1;"
  , "        if (errors < 5) $display(\"cycle %0d: in_ready %b expected %b\", t, in_ready, expect[t][0]); end"
  , "      if (out_data[" P.++ show (outBits - 1) P.++ "] !== expect[t][" P.++ show outBits P.++ "]"
  , "          || (expect[t][" P.++ show outBits P.++ "] && out_data !== expect[t][" P.++ show outBits P.++ ":1])) begin"
  , "        errors = errors + 1;"
  , "        if (errors < 5) $display(\"cycle %0d: out %h expected %h\", t, out_data, expect[t][" P.++ show outBits P.++ ":1]); end"
  , "      if (expect[t][" P.++ show outBits P.++ "] && s[0]) moved = moved + 1;"
  , "      clk = 1; #5; clk = 0;"
  , "    end"
  , "    $display(\"" P.++ name P.++ ": %0d cycles, %0d output beats, %0d mismatches\", " P.++ show cycles P.++ ", moved, errors);"
  , "    $finish;"
  , "  end"
  , "endmodule" ]
