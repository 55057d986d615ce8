{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType, TypeFamilies #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A Keras @BatchNormalization@ that could not be folded into the Dense/Conv2D
before it (it follows an activation, a pool, a merge, the input, ...): per
channel of a beat, @y = activation (requantize (x * scale + offset))@ with the
inference-time constants @scale = gamma / sqrt (var + eps)@ and
@offset = beta - mean * scale@ (generated into @Weights.hs@ as 'Vec's).

= Arithmetic (docs/guide/contract.md, "BatchNormalization")

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

= Fewer multipliers: 'batchNormLanes'

Where the beats come slower than one a cycle (a dense layer's, or a
convolution's pixels at a large initiation interval), @c@ multipliers mostly
wait. 'batchNormLanes' takes @k@ of the @n * k@ channels a beat, after a
"K2C.Scatter" of @n@ and before a "K2C.Collect" of @n@ (the emitted network
composes the three): @k@ multipliers, and a beat of @n * k@ channels every
@n + 1@ cycles. A counter of the beats that moved in says which chunk of the
constants a beat takes; the constants are registered beside it (on ECP5, read
through the counter's multiplexer straight into a MULT18X18D's inputs they cost
3.5 ns of setup: mlp_tanh 81.8 MHz, registered 104.6). Same stages, same
'BatchNormDepth', same arithmetic.
-}
module K2C.BatchNorm
  ( batchNorm
  , batchNormLanes
  , scaleShift
  , BatchNormDepth
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Merge (addExact, mulExact)
import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream)
import K2C.Window (nextIndex)

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

-- | 'batchNorm' on @k@ channels a beat: beat @i@ of every @n@ takes channels
-- @i * k .. i * k + k - 1@ of the constants (see the module header).
batchNormLanes
  :: forall dom n k ia fa iw fw ib fb b
   . ( HiddenClockResetEnable dom, KnownNat n, KnownNat k, 1 <= n
     , KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb, NFDataX b )
  => SNat n
  -> Vec (n * k) (SFixed iw fw) -> Vec (n * k) (SFixed ib fb)
  -> (SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb) -> b)
  -> Stream dom (Vec k (SFixed ia fa)) (Vec k b)
batchNormLanes SNat scales offsets finish = pipeS (SNat @BatchNormDepth) stages
  where
    chunks = zip (unconcatI @n @k scales) (unconcatI @n @k offsets)
    stages input = stageReg (fmap done <$> products)
      where
        chunk    = register (0 :: Index n) (mux (isJust <$> input) (nextIndex <$> chunk) chunk)
        tagged   = stageReg (fmap . (,) . (chunks !!) <$> chunk <*> input)
        products = stageReg (fmap scale <$> tagged)
        scale ((s, o), x) = (o, zipWith (flip mulExact) s x)
        done (o, p) = map finish (zipWith (flip addExact) o p)

-- | @x * s + o@, exactly.
scaleShift
  :: forall ia fa iw fw ib fb
   . (KnownNat ia, KnownNat fa, KnownNat iw, KnownNat fw, KnownNat ib, KnownNat fb)
  => SFixed iw fw -> SFixed ib fb -> SFixed ia fa
  -> SFixed (1 + Max (ia + iw) ib) (Max (fa + fw) fb)
scaleShift s o x = addExact (mulExact x s) o
