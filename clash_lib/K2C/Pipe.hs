{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A free-running pipeline as a stream stage: a function too deep for one clock
cycle (the softmax's divisions, "K2C.Softmax") is cut into @d@ register stages
that shift every cycle, and the stream protocol lives around them: an output
queue and a count of the beats held, so the pipeline never has to stop.

= Hardware

* the pipeline the caller gives (its registers, valid bits included);
* a 'K2C.Fifo.fifo' of @d + 2@ results (LUT RAM) and a count @Index (d + 3)@.

= Protocol and exact timing

* Input ready (registered state only) = fewer than @d + 2@ beats held
  (accepted, result not yet moved out).
* A beat accepted in cycle @a@ enters the pipeline in that cycle and leaves
  its last register in cycle @a + d@, when it enters the queue.
* The queue shows it from the cycle after, and not before the previous result
  has moved out.

So beat @i@ moves in in @a_i = max(v_i, M_(i-d-2) + 1)@ and its result is
valid from @max(a_i + d, M_(i-1)) + 1@ (@M@: the cycles results move out):
the hardware model's engine block with one step per beat, pipeline depth
@d - 1@ and a queue of @d + 2@. With downstream always ready it takes a beat
every cycle and adds @d + 1@ cycles of latency.
-}
module K2C.Pipe
  ( pipeS
  , Pipeline (..)
  , (>->)
  , pipeline
  , PipelineDepth
  , mapP
  , mapP2
  , mapTable
  , stageReg
  , MapDepth
  , MapTableDepth
  , Map2Depth
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Fifo (fifo, nextCount)
import K2C.Stream (Stream)

-- | A stream stage around @pipe@, a pipeline of exactly @d@ registers from
-- its input (@Nothing@: no beat this cycle) to its output.
pipeS
  :: forall dom d a b
   . (HiddenClockResetEnable dom, KnownNat d, NFDataX b)
  => SNat d
  -> (Signal dom (Maybe a) -> Signal dom (Maybe b))
  -> Stream dom a b
pipeS SNat pipe (input, readyOut) = (output, readyIn)
  where
    held     = register (0 :: Index (d + 3)) (nextCount <$> held <*> accepted <*> taken)
    readyIn  = (< maxBound) <$> held
    accepted = readyIn .&&. (isJust <$> input)
    taken    = (isJust <$> output) .&&. readyOut
    (output, _) = fifo (SNat @(d + 2)) (pipe (mux accepted input (pure Nothing)), readyOut)


-- | A free-running pipeline of exactly @d@ registers that is not yet a stream
-- stage: layers that are one (a layer of constants, "K2C.Cmvm") compose with
-- '>->' and become one stage with 'pipeline', so that a run of them keeps one
-- output queue and one input register instead of one of each a layer.
newtype Pipeline dom (d :: Nat) a b = Pipeline (Signal dom (Maybe a) -> Signal dom (Maybe b))

-- | One pipeline after the other: their registers add up.
(>->) :: Pipeline dom d a b -> Pipeline dom e b c -> Pipeline dom (d + e) a c
Pipeline f >-> Pipeline g = Pipeline (g . f)

infixr 1 >->

-- | A pipeline as a stream stage: 'pipeS' around a register of the accepted
-- beat and the pipeline's @d@ registers ('PipelineDepth'). The input register
-- keeps the producer's output queue (LUT RAM, read combinationally) out of
-- the first stage's cycle.
pipeline
  :: forall dom d a b
   . (HiddenClockResetEnable dom, KnownNat d, NFDataX a, NFDataX b)
  => Pipeline dom d a b
  -> Stream dom a b
pipeline (Pipeline p) = pipeS (SNat @(PipelineDepth d)) (p . stageReg)

-- | 'pipeline''s registers: the input register and the pipeline's.
type PipelineDepth d = 1 + d

-- | A function of each beat as a stream stage of one register ('pipeS' with
-- @d = 1@): the result is registered, so nothing the function computes (a
-- multiplier, a table's address) adds to its producer's or consumer's paths.
-- A table read ("K2C.Lut") just before the register becomes a block RAM with
-- a synchronous read. Two cycles of latency with downstream ready.
mapP :: (HiddenClockResetEnable dom, NFDataX b) => (a -> b) -> Stream dom a b
mapP f = pipeS (SNat @MapDepth) (stageReg . fmap (fmap f))

-- | 'mapP''s registers.
type MapDepth = 1

-- | A table activation ("K2C.Lut") as a stream stage of two registers: the
-- first becomes the block RAM's synchronous read, the second its output
-- register (ECP5: REGMODE=OUTREG, keras2clash's fpga/bramregs.py), so the
-- route to the output queue's LUT RAM starts from a fast flip-flop, not 5.6 ns
-- after the clock from the block RAM's read ('K2C.Activation.Finish' does the
-- same inside an engine). Three cycles of latency with downstream ready.
mapTable :: (HiddenClockResetEnable dom, NFDataX b) => (a -> b) -> Stream dom a b
mapTable f = pipeS (SNat @MapTableDepth) (stageReg . stageReg . fmap (fmap f))

-- | 'mapTable''s registers.
type MapTableDepth = 2

-- | Two functions, each followed by a register, after a register of the input
-- beat: 'mapP' for a function too deep for one cycle, cut in two (@g . f@;
-- "K2C.Relu".'K2C.Relu.reluProduct' then 'K2C.Relu.reluSelect'). The input
-- register keeps the producer's queue (LUT RAM, read combinationally) off a
-- multiplier's input: @f@'s products become DSP blocks with registered inputs
-- (mlp_tanh on ECP5: the queue's read into a MULT18X18D, 16.7 ns). Four cycles
-- of latency with downstream ready.
mapP2 :: (HiddenClockResetEnable dom, NFDataX a, NFDataX m, NFDataX b) => (a -> m) -> (m -> b) -> Stream dom a b
mapP2 f g = pipeS (SNat @Map2Depth) (stageReg . fmap (fmap g) . stageReg . fmap (fmap f) . stageReg)

-- | 'mapP2''s registers.
type Map2Depth = 3

-- | One pipeline register for beats: the valid bit reset, the data not (no
-- reset and no logic after a ROM read lets synthesis absorb the register into
-- a block RAM).
stageReg :: (HiddenClockResetEnable dom, NFDataX a) => Signal dom (Maybe a) -> Signal dom (Maybe a)
stageReg input = (\v x -> if v then Just x else Nothing) <$> valid <*> held
  where
    valid = register False (isJust <$> input)
    held  = delay (deepErrorX "stageReg: empty") (fromJustX <$> input)
