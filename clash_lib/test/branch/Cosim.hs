{-# LANGUAGE DataKinds, NoImplicitPrelude, RankNTypes, ScopedTypeVariables,
             FlexibleContexts, TypeApplications, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Cycle-exact co-simulation vectors for the tops of "Tops": each top runs in
the Clash simulation on random input beats with random idle gaps and
downstream stalls, and this writes, per top, a Verilog testbench plus its
stimulus (@<top>.in@) and expected response (@<top>.expect@). The testbench
replays the stimulus into the generated Verilog (Icarus or Verilator
@--binary --timing@) and compares every cycle @in_ready@ and, when valid,
@out_data@; it prints "N mismatches".

@cabal test branch --test-option=--vectors --test-option=DIR@ writes them
into DIR, with @beats.txt@: per top, the output beats the replay must see
(lines @<top>: N output beats in C cycles@). tests/test_blocks.py replays them.
-}
module Cosim (writeVectors) where

import Clash.Prelude hiding (split)
import qualified Prelude as P
import Clash.Signal.Internal (Signal ((:-)))
import System.Random (StdGen, mkStdGen, randomRs, split)

import Tops

-- | Cycles simulated per top.
cycles :: Int
cycles = 4000

-- | Write every top's testbench and vectors into @dir@, and @dir/beats.txt@.
writeVectors :: FilePath -> IO ()
writeVectors dir = do
  counts <- P.sequence
    [ vectors dir "residual_top" residualTop (mkStdGen 11)
    , vectors dir "wired_top" wiredTop (mkStdGen 14)
    , vectors dir "average_shift_top" averageShiftTop (mkStdGen 12)
    , vectors dir "average_divide_top" averageDivideTop (mkStdGen 13) ]
  P.writeFile (dir P.++ "/beats.txt") (P.unlines counts)

type Top a b
  =  Clock System -> Reset System -> Enable System
  -> Signal System (Maybe a) -> Signal System Bool
  -> (Signal System (Maybe b), Signal System Bool)

vectors
  :: forall a b . (BitPack a, BitPack b, NFDataX a, NFDataX b)
  => FilePath -> String -> Top a b -> StdGen -> IO String
vectors dir name top gen = do
  P.writeFile (dir P.++ "/" P.++ name P.++ ".in") (P.unlines (P.map stimulus rows))
  P.writeFile (dir P.++ "/" P.++ name P.++ ".expect") (P.unlines (P.map response rows))
  P.writeFile (dir P.++ "/tb_" P.++ name P.++ ".v")
              (testbench name (widthOf @(Maybe a)) (widthOf @(Maybe b)))
  P.putStrLn line
  P.return line
  where
    (g1, rest) = split gen
    (g2, g3) = split rest
    beats = P.map (unpack . fromInteger) (randomRs (0, 2 P.^ widthOf @a P.- 1 :: Integer) g3) :: [a]
    -- one more idle cycle first: cycle 0 is the reset cycle
    gaps = case geometric 30 g1 of { g : gs -> g + 1 : gs; [] -> [] }
    readyOut = fromList (False : P.map (>= 40) (randomRs (0, 99 :: Int) g2))
    (output, readyIn) = top clockGen resetGen enableGen input readyOut
    input = source gaps beats readyIn
    rows = P.take cycles (sample (bundle (input, readyOut, output, readyIn)))
    line = name P.++ ": " P.++ show moved P.++ " output beats in " P.++ show cycles P.++ " cycles"
    moved = P.length [() | (_, True, Just _, _) <- rows]
    stimulus (i, r, _, _) = bits (pack i) P.++ bits (pack r)
    response (_, _, o, r) = bits (pack o) P.++ bits (pack r)

geometric :: Int -> StdGen -> [Int]
geometric percent gen = runs (randomRs (0, 99 :: Int) gen)
  where runs rolls = let (idle, more) = P.span (< percent) rolls
                     in P.length idle : runs (P.drop 1 more)

-- | Offer the beats after their gaps, holding each until it moves.
source :: [Int] -> [a] -> Signal dom Bool -> Signal dom (Maybe a)
source _ [] ready' = Nothing :- source [] [] (tailS ready')
source gaps (beat : beats) ~(r :- rs) = case gaps of
  g : gs | g > 0 -> Nothing :- source (g - 1 : gs) (beat : beats) rs
  _ : gs         -> Just beat :- if r then source gs beats rs else source (0 : gs) (beat : beats) rs
  []             -> source [0] (beat : beats) (r :- rs)

tailS :: Signal dom a -> Signal dom a
tailS ~(_ :- more) = more

widthOf :: forall t . BitPack t => Int
widthOf = natToNum @(BitSize t)

-- | Bits MSB first, undefined bits as @x@.
bits :: KnownNat n => BitVector n -> String
bits = P.map undefinedAsX . P.filter (`P.elem` "01.") . P.drop 2 . P.show
  where
    undefinedAsX '.' = 'x'
    undefinedAsX b   = b

testbench :: String -> Int -> Int -> String
testbench name inBits outBits = P.unlines
  [ "`timescale 1ns/1ps"
  , "module tb;"
  , "  reg clk = 0, rst = 1;"
  , "  reg [" P.++ show inBits P.++ ":0] stim [0:" P.++ show (cycles P.- 1) P.++ "];"
  , "  reg [" P.++ show outBits P.++ ":0] want [0:" P.++ show (cycles P.- 1) P.++ "];"
  , "  reg [" P.++ show inBits P.++ ":0] s;"
  , "  wire [" P.++ show (outBits P.- 1) P.++ ":0] out_data;"
  , "  wire in_ready;"
  , "  integer t, errors, moved;"
  , "  " P.++ name P.++ " dut (.clk(clk), .rst(rst), .en(1'b1), .in_data(s[" P.++ show inBits
      P.++ ":1]), .out_ready(s[0]), .out_data(out_data), .in_ready(in_ready));"
  , "  initial begin"
  , "    errors = 0; moved = 0;"
  , "    $readmemb(\"" P.++ name P.++ ".in\", stim);"
  , "    $readmemb(\"" P.++ name P.++ ".expect\", want);"
  , "    for (t = 0; t < " P.++ show cycles P.++ "; t = t + 1) begin"
  , "      s = stim[t]; rst = (t == 0);"
  , "      #5;"
  , "      if (in_ready !== want[t][0]) begin errors = errors + 1;"
  , "        if (errors < 5) $display(\"cycle %0d: in_ready %b expected %b\", t, in_ready, want[t][0]); end"
  , "      if (out_data[" P.++ show (outBits P.- 1) P.++ "] !== want[t][" P.++ show outBits P.++ "]"
  , "          || (want[t][" P.++ show outBits P.++ "] && out_data !== want[t][" P.++ show outBits P.++ ":1])) begin"
  , "        errors = errors + 1;"
  , "        if (errors < 5) $display(\"cycle %0d: out %h expected %h\", t, out_data, want[t][" P.++ show outBits P.++ ":1]); end"
  , "      if (want[t][" P.++ show outBits P.++ "] && s[0]) moved = moved + 1;"
  , "      clk = 1; #5; clk = 0;"
  , "    end"
  -- "#1": Verilator 5.006 --timing otherwise prints the counters as they
  -- were before the loop (0 beats, 0 mismatches).
  , "    #1 $display(\"" P.++ name P.++ ": %0d cycles, %0d output beats, %0d mismatches\", " P.++ show cycles P.++ ", moved, errors);"
  , "    $finish;"
  , "  end"
  , "endmodule" ]
