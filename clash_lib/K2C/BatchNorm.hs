{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A Keras @BatchNormalization@ that could not be folded into the Dense/Conv2D
before it (it follows an activation, a pool, a merge, the input, ...): per
channel of a beat, @y = activation (requantize (x * scale + offset))@ with the
inference-time constants @scale = gamma / sqrt (var + eps)@ and
@offset = beta - mean * scale@ (generated into @Weights.hs@ as 'Vec's).

= Arithmetic (docs/contract.md, "BatchNormalization")

The scale is stored in the layer's weight format @SFixed iw fw@, the offset in
its bias format @SFixed ib fb@. The product ('K2C.Merge.mulExact',
@SFixed (ia + iw) (fa + fw)@) and the sum ('K2C.Merge.addExact',
@SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb)@) are exact; the one
rounding is the caller's @requantize@ (round half up, saturate) to the output
format, followed by the fused activation.

= Hardware, timing, protocol

One multiplier and one adder per channel, all channels of a beat in the same
cycle, pipelined in 'BatchNormDepth' register stages on "K2C.Pipe": the
input beat (the multipliers' input registers: the producer's queue is LUT RAM
read combinationally, and on ECP5 its read and route straight into a
MULT18X18D's unregistered input were mlp_tanh's critical path, 16.3 ns), the
products (the multipliers' output registers), then the sum, rounding and
activation (a table activation's ROM becomes a synchronous block RAM). One
beat a cycle; its timing is "K2C.Pipe"'s with @d = 3@.
-}
module K2C.BatchNorm
  ( batchNorm
  , scaleShift
  , BatchNormDepth
  ) where

import Clash.Prelude

import K2C.Merge (addExact, mulExact)
import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream)

-- | Register stages of 'batchNorm': the products, then the finished values.
type BatchNormDepth = 3

-- | The stage: per channel 'scaleShift', then @finish@ (requantize and activate).
batchNorm
  :: forall dom c ia fa iw fw ib fb b
   . ( HiddenClockResetEnable dom, KnownNat c
     , KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb, NFDataX b )
  => Vec c (SFixed iw fw) -> Vec c (SFixed ib fb)
  -> (SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb) -> b)
  -> Stream dom (Vec c (SFixed ia fa)) (Vec c b)
batchNorm scales offsets finish = pipeS (SNat @BatchNormDepth) stages
  where
    stages input = stageReg (fmap (map finish . zipWith (flip addExact) offsets) <$> products)
      where
        products = stageReg (fmap (zipWith (flip mulExact) scales) <$> stageReg input)

-- | @x * s + o@, exactly.
scaleShift
  :: forall ia fa iw fw ib fb
   . (KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb)
  => SFixed iw fw -> SFixed ib fb -> SFixed ia fa
  -> SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb)
scaleShift s o x = addExact (mulExact x s) o
