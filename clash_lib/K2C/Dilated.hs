{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, RankNTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The dilated 2-D convolution (Keras Conv2D or Conv1D with @dilation_rate@
@(dh, dw)@, /valid/ padding: put "K2C.Pad" in front for 'same' or
'causal'): the window generator ("K2C.Window") of the dilated extent
@eh x ew@, @eh = (kh - 1) * dh + 1@, @ew = (kw - 1) * dw + 1@, then a tap
selection that keeps every @dh@-th row and @dw@-th column of it (wires only),
the window flattened in Keras kernel order ("K2C.Conv"), and the filter
engine ("K2C.Engine").

An image is @h * w@ beats of @Vec c a@ in raster order; the output is
@h2 * w2@ beats of @Vec f o@ in raster order, @h2 = (h - eh) \`div\` sh + 1@,
@w2 = (w - ew) \`div\` sw + 1@. Output @(i, j)@ is the engine's result for the
@K = kh * kw * c@ values at input pixels @(i*sh + r*dh, j*sw + s*dw)@,
@r < kh@, @s < kw@: the dense contract per output pixel and filter.

= Knobs and sizes

Those of 'K2C.Conv.conv2d' with the same @K@: multipliers @p * ceil(K / b)@
and the ROM do not grow with the dilation. Only the window generator does,
as it would for an @eh x ew@ kernel: line buffers @w * (eh - 1) * c@ values,
a window register of @eh * ew * c@ values (the engine's holds the taps only).

= Timing (exact)

Exactly 'K2C.Conv.conv2d' with the kernel @(eh, ew)@: the tap selection adds
no register and no latency, so the window generator's rules ("K2C.Window",
with @(kh, kw) = (eh, ew)@) and the engine's ("K2C.Engine") apply unchanged;
with the 'K2C.Conv.direct' queue the engine loads the taps from the
generator's register a cycle after the accept (@e = 1@).
-}
module K2C.Dilated
  ( conv2dDilated
  , dilateWindow
  , dilate
  , Extent
  ) where

import Clash.Prelude hiding (window)

import K2C.Activation (Finish, TableRegs)
import K2C.Conv (WindowQueue, flattenWindow, windowsInto)
import K2C.Engine (EngineShape, engineFrom)
import K2C.Filter (Accumulates)
import K2C.Stream (Stream)
import K2C.WeightMemory (WeightMemory)

-- | The positions one dilated axis of @k@ taps, @d@ apart, spans.
type Extent k d = (k - 1) * d + 1

-- | The taps of one dilated axis: element @i@ is input element @i * d@.
-- (Padded with @d - 1@ unused elements to @k * d@, cut into @k@ groups of
-- @d@, the first of each group kept: wires only. @fold const@ rather than
-- 'head': Clash 1.6.4's Verilog template of 'head' fails to parse when the
-- elements are vectors, as a window's pixels are.)
dilate
  :: forall k d a . (KnownNat k, KnownNat d, 1 <= k, 1 <= d)
  => SNat d -> Vec (Extent k d) a -> Vec k a
dilate d v = map (\group -> leToPlus @1 @d (fold const group)) (unconcat d (v ++ unused))
  where
    unused = repeat @(d - 1) (errorX "dilate: past the window")

-- | The @kh x kw@ taps of a window of the dilated extent.
dilateWindow
  :: forall kh kw dh dw c a
   . (KnownNat kh, KnownNat kw, KnownNat dh, KnownNat dw, 1 <= kh, 1 <= kw, 1 <= dh, 1 <= dw)
  => SNat dh -> SNat dw
  -> Vec (Extent kh dh) (Vec (Extent kw dw) (Vec c a)) -> Vec kh (Vec kw (Vec c a))
dilateWindow dh dw = map (dilate @kw dw) . dilate @kh dh

-- | A valid dilated 2-D convolution of an @h x w x c@ image with @f@ filters
-- of @kh x kw x c@, dilation @(dh, dw)@, strides @(sh, sw)@, computed by @p@
-- PEs in @b@ cycles per group. @finish@: "requantize, then activate" per
-- output value.
conv2dDilated
  :: forall dom h w kh kw dh dw sh sw c f p b l ch g ai af wi wf bi bf ci cf o t mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat dh, KnownNat dw
     , KnownNat sh, KnownNat sw, KnownNat c
     , 1 <= kh, 1 <= kw, 1 <= dh, 1 <= dw, 1 <= sh, 1 <= sw
     , Extent kh dh <= h, Extent kw dw <= w
     , EngineShape (kh * kw * c) f p b ch g, KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat dh -> SNat dw -> SNat sh -> SNat sw
  -> SNat p
  -> SNat b
  -> SNat l
  -> WindowQueue dom (Vec (kh * kw * c) (SFixed ai af))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec c (SFixed ai af)) (Vec f o)
conv2dDilated h w SNat SNat dh dw sh sw p b l queue weights finish =
  windowsInto h w (SNat @(Extent kh dh)) (SNat @(Extent kw dw)) sh sw
    (flattenWindow . dilateWindow @kh @kw dh dw) queue
    (\loading -> engineFrom p b l loading weights finish)
