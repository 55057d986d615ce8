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
cycle: a combinational 'K2C.Stream.mapS' stage (no register, no latency;
valid when its producer is, ready when its consumer is).
-}
module K2C.BatchNorm
  ( batchNorm
  , scaleShift
  ) where

import Clash.Prelude

import K2C.Merge (addExact, mulExact)
import K2C.Stream (Stream, mapS)

-- | The stage: per channel 'scaleShift', then @finish@ (requantize and activate).
batchNorm
  :: forall dom c ia fa iw fw ib fb b
   . (KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb)
  => Vec c (SFixed iw fw) -> Vec c (SFixed ib fb)
  -> (SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb) -> b)
  -> Stream dom (Vec c (SFixed ia fa)) (Vec c b)
batchNorm scales offsets finish = mapS (zipWith3 (\s o x -> finish (scaleShift s o x)) scales offsets)

-- | @x * s + o@, exactly.
scaleShift
  :: forall ia fa iw fw ib fb
   . (KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb)
  => SFixed iw fw -> SFixed ib fb -> SFixed ia fa
  -> SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb)
scaleShift s o x = addExact (mulExact x s) o
