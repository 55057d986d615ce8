{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The depthwise 2-D convolution (Keras DepthwiseConv2D, and the depthwise half
of SeparableConv2D; /valid/ padding: put "K2C.Pad" in front for 'same'): the
window generator ("K2C.Window"), the window regrouped per channel (wires
only), then the depthwise engine: the filter engine ("K2C.Engine") whose
processing elements (PEs) each see only the window of their own channel.

An image is @h * w@ beats of @Vec c a@ in raster order; the output is
@h2 * w2@ beats of @Vec (c * m) o@, @m@ the depth multiplier. Output channel
@f = ch_in * m + j@ is the dense contract (docs/guide/contract.md) over the
@K = kh * kw@ values of input channel @ch_in = f \`div\` m@ in the window, in
Keras kernel order (@i * kw + j'@ for kernel row @i@, column @j'@), with its
own filter: the accumulator is exact for @n_in = K@.

= Knobs and sizes

* @p@, @1 <= p <= c * m@: output channels in parallel; @G = ceil(c * m / p)@
  groups; group @g@ is output channels @g*p .. g*p+p-1@ (padding channels past
  @c * m@ in the last group are computed on channel @c - 1@ with zero weights
  and dropped).
* @b@, @1 <= b <= K@: cycles per group; chunks of @ch = ceil(K / b)@.
* multipliers @p * ch@: a PE multiplies only its own channel's window, never
  the other channels' zeros (a Conv2D with the depthwise kernel spread over
  all channels would need @c@ times as many);
* ROM: exactly the engine's, @G * b@ words of @p * (ch * BitSize w +
  BitSize bias)@ bits, word @g*b + t@ holding output channel @g*p + q@'s chunk
  @t@ for PE @q@;
* registers: "K2C.Window"'s (line buffers @w * (kh - 1) * c@ values, a
  window register of @kh * kw * c@ values), the engine's held window, here
  @b * c * ch@ values (all channels' chunks rotate together), @p@
  accumulators (none when @b = 1@), two output vectors of @c * m@ values;
* per PE one multiplexer of @c@ chunks driven by the group counter (a
  constant table gives each group's channels; for @G = 1@ it is wires).

= Timing (exact)

The control is the filter engine's ('engineWith'), so every rule of
"K2C.Engine" and "K2C.Conv" holds unchanged with @S = G * b@ steps per
window: window @i@, valid at the generator's output from cycle @v_i@, is
accepted in @a_i = max(v_i, a_(i-1) + G*b)@ with downstream always ready,
and its output beat moves in @a_i + e + G*b + D + 1@ (@e = 1@ behind the
'K2C.Conv.direct' queue: the window loaded from the generator's register a
cycle after the accept, "K2C.Engine"'s 'Loading'); under downstream stalls
the engine's output queue and credit rule apply as written there.
-}
module K2C.Depthwise
  ( depthwise2d
  , depthwiseEngine
  , channelWindows
  ) where

import Clash.Prelude hiding (window)

import K2C.Activation (Finish, TableRegs)
import K2C.Conv (WindowQueue, windowsInto)
import K2C.Engine (EngineShape, Loading, chunks, engineWith)
import K2C.Filter (Accumulates)
import K2C.Stream (Stream)
import K2C.WeightMemory (WeightMemory)

-- | A window regrouped per channel: channel @ch@'s values in Keras kernel
-- order, element @[i][j][ch]@ at position @i * kw + j@ of vector @ch@.
channelWindows :: (KnownNat c, KnownNat (kh * kw)) => Vec kh (Vec kw (Vec c a)) -> Vec c (Vec (kh * kw) a)
channelWindows = transpose . concat

-- | The input channel of each PE in each group: @min(c - 1, (g*p + q) div m)@
-- (a constant, evaluated at elaboration).
channelTable
  :: forall g p c m . (KnownNat g, KnownNat p, KnownNat c)
  => SNat m -> Vec g (Vec p (Index c))
channelTable m@SNat = map (\grp -> map (channelOf grp) indicesI) indicesI
  where
    channelOf :: Index g -> Index p -> Index c
    channelOf grp q = fromInteger (min (natToNum @c - 1)
                                       ((toInteger grp * natToNum @p + toInteger q) `div` snatToNum m))

-- | The depthwise engine: @c@ per-channel windows of @k@ values in, @c * m@
-- results out, @p@ PEs, @b@ cycles per group, loading each window as
-- @loading@ says ('K2C.Engine.Loading'). @finish@: requantize then activate.
depthwiseEngine
  :: forall dom c m k f p b l ch g ai af wi wf bi bf ci cf o t e mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , KnownNat c, KnownNat m, 1 <= c, f ~ (c * m)
     , EngineShape k f p b ch g, KnownNat l, TableRegs t, KnownNat e, e <= 1
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat m
  -> SNat p
  -> SNat b
  -> SNat l
  -> Loading dom e (Vec c (Vec k (SFixed ai af)))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec c (Vec k (SFixed ai af))) (Vec f o)
depthwiseEngine m SNat SNat l loading =
  engineWith @dom @(Vec c (Vec k (SFixed ai af))) @(Vec b (Vec c (Vec ch (SFixed ai af)))) @f @p @b @l @ch @g
             l loading (transpose . map chunks) (`rotateLeftS` d1) operands
  where
    -- The held window is chunk-major and rotates as a whole, so its head is every
    -- channel's current chunk (no 'map head': Clash 1.6.4's Verilog backend cannot
    -- render the head primitive as a mapped function).
    operands :: Index g -> Vec b (Vec c (Vec ch (SFixed ai af))) -> Vec p (Vec ch (SFixed ai af))
    operands grp held = map (current !!) (channelTable @g @p @c m !! grp)
      where
        current :: Vec c (Vec ch (SFixed ai af))
        current = leToPlus @1 @b head held

-- | A valid depthwise convolution of an @h x w x c@ image, kernel @kh x kw@,
-- strides @(sh, sw)@, depth multiplier @m@, computed by @p@ PEs in @b@
-- cycles per group; @queue@ between window generator and engine as in
-- 'K2C.Conv.conv2d' ('K2C.Conv.WindowQueue').
depthwise2d
  :: forall dom h w kh kw sh sw c m p b l ch g ai af wi wf bi bf ci cf o t mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw
     , KnownNat c, KnownNat m, 1 <= c, 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw, kh <= h, kw <= w
     , EngineShape (kh * kw) (c * m) p b ch g, KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> SNat m
  -> SNat p
  -> SNat b
  -> SNat l
  -> WindowQueue dom (Vec c (Vec (kh * kw) (SFixed ai af)))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec c (SFixed ai af)) (Vec (c * m) o)
depthwise2d h w kh kw sh sw m p b l queue weights finish =
  windowsInto h w kh kw sh sw channelWindows queue
    (\loading -> depthwiseEngine m p b l loading weights finish)
