{-# LANGUAGE DataKinds, NoImplicitPrelude, TypeApplications, TemplateHaskell, RankNTypes,
             FlexibleContexts, MonoLocalBinds, TypeOperators, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Synthesizable tops for K2C.Fifo, K2C.Branch and K2C.Merge (tests/test_blocks.py turns them
into Verilog, lints them, and replays the Clash simulation on them):

* @residual_top@: a 3-way fork/join (nested 'branches') whose branches are
  a multi-cycle stage plus a fifo, a lone fifo, and another multi-cycle stage
  plus a depth-1 fifo, each branch in a different SFixed format, merged
  element-wise with every function of K2C.Merge (average by 3: divider, by 2:
  shift) and requantized, one output per function;
* @wired_top@: the same three branches and merges wired by name, as a network
  that is not series-parallel is ('fork' to three readers, 'joined', 'moves');
* @average_shift_top@ / @average_divide_top@: 'average' by 4 (must be wires:
  no divider in the Verilog) and by 3 (a divider).
-}
module Tops where

import Clash.Prelude

import K2C.Activation (relu, requantize)
import K2C.Branch (branches, fork, joined, moves)
import K2C.Fifo (fifo)
import K2C.Merge
import K2C.Stream (Stream, mapS, (|>))
import Stages (hold)
import TopPorts (ports)

type Fx = SFixed 4 4

-- | One output beat element: one result per merge function.
type Merged = (SFixed 3 5, SFixed 4 4, SFixed 3 5, SFixed 4 4, SFixed 4 4)

asTop
  :: (HiddenClockResetEnable System => Stream System a b)
  -> Clock System -> Reset System -> Enable System
  -> Signal System (Maybe a) -> Signal System Bool
  -> (Signal System (Maybe b), Signal System Bool)
asTop block clk rst en input readyOut =
  withClockResetEnable clk rst en block (input, readyOut)

residual :: HiddenClockResetEnable System => Stream System (Vec 2 Fx) (Vec 2 Merged)
residual =
  branches (hold d3 (map (requantize @4 @4 @2 @6)) |> fifo d2)
           (branches (fifo d5) (hold d2 (map (requantize @4 @4 @6 @2)) |> fifo d1))
  |> mapS (\(x0, (x1, x2)) -> zipWith3 merged x0 x1 x2)

wired :: HiddenClockResetEnable System => Stream System (Vec 2 Fx) (Vec 2 Merged)
wired (input, readyOut) = (output, readyIn)
  where
    (reads, readyIn) = fork input (ready0 :> ready1 :> ready2 :> Nil)
    (out0, ready0) = (hold d3 (map (requantize @4 @4 @2 @6)) |> fifo d2) (reads !! (0 :: Int), move)
    (out1, ready1) = fifo d5 (reads !! (1 :: Int), move)
    (out2, ready2) = (hold d2 (map (requantize @4 @4 @6 @2)) |> fifo d1) (reads !! (2 :: Int), move)
    joinedIn = joined out0 (joined out1 out2)
    move = moves joinedIn mergeReady
    (output, mergeReady) = mapS (\(x0, (x1, x2)) -> zipWith3 merged x0 x1 x2) (joinedIn, readyOut)

merged :: SFixed 2 6 -> SFixed 4 4 -> SFixed 6 2 -> Merged
merged a b c =
  ( relu (requantize (addExact a (subExact b c)))
  , average d3 (addExact a (addExact b c))
  , requantize (maxExact a (minExact b c))
  , average d2 (addExact a b)
  , requantize (mulExact a c) )

residualTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Fx)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 Merged)), Signal System Bool)
residualTop = asTop residual
{-# NOINLINE residualTop #-}
{-# ANN residualTop (ports "residual_top") #-}

wiredTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 Fx)) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 Merged)), Signal System Bool)
wiredTop = asTop wired
{-# NOINLINE wiredTop #-}
{-# ANN wiredTop (ports "wired_top") #-}

averageShiftTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 (SFixed 7 4))) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 (SFixed 4 4))), Signal System Bool)
averageShiftTop = asTop (mapS (map (average d4)))
{-# NOINLINE averageShiftTop #-}
{-# ANN averageShiftTop (ports "average_shift_top") #-}

averageDivideTop
  :: Clock System -> Reset System -> Enable System
  -> Signal System (Maybe (Vec 2 (SFixed 7 4))) -> Signal System Bool
  -> (Signal System (Maybe (Vec 2 (SFixed 4 4))), Signal System Bool)
averageDivideTop = asTop (mapS (map (average d3)))
{-# NOINLINE averageDivideTop #-}
{-# ANN averageDivideTop (ports "average_divide_top") #-}
