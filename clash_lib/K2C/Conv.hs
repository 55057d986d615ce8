{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, ConstraintKinds, TypeFamilies,
             NoStarIsType, RankNTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The 2-D convolution (Keras Conv2D, /valid/ padding: put "K2C.Pad" in front
for 'same'): the window generator ("K2C.Window") followed by the filter
engine ("K2C.Engine"), with the window flattened in Keras kernel order in
between (wires only).

An image is @h * w@ beats of @Vec c a@ in raster order; the output is
@h2 * w2@ beats of @Vec f o@ in raster order, @h2 = (h - kh) \`div\` sh + 1@,
@w2 = (w - kw) \`div\` sw + 1@. Each output beat is the engine's result for
one window of @K = kh * kw * c@ values: the dense contract per output pixel
and filter.

= Knobs and sizes

* @p@, @1 <= p <= f@: filters in parallel; @G = ceil(f / p)@ groups.
* @b@, @1 <= b <= K@: cycles per group; chunks of @ch = ceil(K / b)@.
* multipliers @p * ch@; ROM @G * b@ words of @p * (ch * BitSize w +
  BitSize bias)@ bits; plus the storage of "K2C.Window" (line buffers
  @w * (kh - 1) * c@ values, one window register of @K@ values) and of the
  engine (window @b * ch@ values, @p@ accumulators, two output vectors of @f@
  values).

= Timing (exact)

The window generator's output is the engine's input; each follows its own
rules ("K2C.Window", "K2C.Engine"). With downstream always ready:

* window @i@ becomes valid at the generator's output in cycle @v_i@, which is
  the cycle the pixel completing it is accepted (see "K2C.Window" for when
  that pixel has to wait);
* the engine accepts it in cycle @a_i = max(v_i, a_(i-1) + G*b)@ and output
  beat @i@ moves in cycle @a_i + e + G*b + D + 1@ (@D@: the engine's pipeline
  depth, 0 when not pipelined; @e = 1@ with the 'direct' queue, where the
  engine loads the window from the generator's shift register in the cycle
  after it accepted it, 0 behind a FIFO of windows: "K2C.Engine"'s 'Loading').

With pixels one per cycle, consecutive windows of an image complete at
least @s = min(sw, sh * w - (w2 - 1) * sw)@ pixels apart (@sw@ within a row,
@sh * w - (w2 - 1) * sw@ from a row's last window to the next row's first).
So when @G*b <= s@ the engine takes every window the cycle it appears, and
the first output of an image moves @(kh - 1) * w + kw + e + G*b + D@ cycles after
its first pixel is accepted (the first window appears @(kh - 1) * w + kw - 1@
cycles after it, "K2C.Window"). When @G*b > s@ the engine sets the pace at
the closer windows: a window the engine cannot take yet waits in the
generator's shift register, which stops its input until the engine takes it.
-}
module K2C.Conv
  ( conv2d
  , flattenWindow
  , WindowQueue (..)
  , direct
  , queued
  , windowsInto
  ) where

import Clash.Prelude hiding (window)

import K2C.Activation (Finish, TableRegs)
import K2C.Engine (EngineShape, Loading, afterAccept, atAccept, engineFrom)
import K2C.Fifo (fifo)
import K2C.Filter (Accumulates)
import K2C.Stream (Stream, mapS, (|>))
import K2C.WeightMemory (WeightMemory)
import K2C.Window (WindowShape, intoHeld, window, windowHeld)

-- | What sits between a convolution's window generator and its engine.
data WindowQueue dom a
  = Direct
    -- ^ Nothing: the engine loads each window from the generator's shift
    -- register in the cycle after it accepted it ('K2C.Engine.afterAccept',
    -- 'K2C.Window.windowHeld'): one LUT per window bit, one cycle of latency.
  | Queued (Stream dom a a)
    -- ^ A FIFO of windows that lets the generator run ahead when its windows
    -- come in bursts (the windows of a row back to back, none while the next
    -- row's first columns come in); the engine loads the FIFO's output in the
    -- cycle it accepts it ('K2C.Engine.engine').

-- | No queue: the engine loads from the generator's register.
direct :: WindowQueue dom a
direct = Direct

-- | A FIFO of @n@ windows ('K2C.Fifo.fifo').
queued :: (HiddenClockResetEnable dom, KnownNat n, 1 <= n, NFDataX a) => SNat n -> WindowQueue dom a
queued n = Queued (fifo n)

-- | The window generator of an @h x w@ image, @kh x kw@ windows, strides
-- @(sh, sw)@, regrouped by @f@ (wires), into an engine through @queue@,
-- the engine loading as the queue allows ('K2C.Engine.Loading'): @direct@
-- from the generator's register ('afterAccept'), @queued@ from the FIFO's
-- output as it accepts it ('atAccept').
windowsInto
  :: (HiddenClockResetEnable dom, WindowShape h w kh kw sh sw c, NFDataX a)
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> (Vec kh (Vec kw (Vec c a)) -> x)
  -> WindowQueue dom x
  -> (forall e . (KnownNat e, e <= 1) => Loading dom e x -> Stream dom x y)
  -> Stream dom (Vec c a) y
windowsInto h w kh kw sh sw f Direct engineLoading =
  intoHeld (windowHeld h w kh kw sh sw) f (engineLoading . afterAccept)
windowsInto h w kh kw sh sw f (Queued queue) engineLoading =
  window h w kh kw sh sw |> mapS f |> queue |> engineLoading atAccept

-- | A window as one vector in Keras kernel order: element @[i][j][ch]@ goes to
-- index @(i * kw + j) * c + ch@ (row-major over @(kh, kw, c)@).
flattenWindow :: Vec kh (Vec kw (Vec c a)) -> Vec (kh * kw * c) a
flattenWindow = concat . map concat

-- | A valid 2-D convolution of an @h x w x c@ image with @f@ filters of
-- @kh x kw x c@, strides @(sh, sw)@, computed by @p@ PEs in @b@ cycles per
-- group, @l@ adder levels per pipeline stage. @queue@ sits between the window
-- generator and the engine ('WindowQueue'). @finish@: "requantize, then
-- activate" per output value ('K2C.Activation.Finish').
conv2d
  :: forall dom h w kh kw sh sw c f p b l ch g ai af wi wf bi bf ci cf o t mem
   . ( HiddenClockResetEnable dom, WeightMemory mem dom
     , KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw
     , KnownNat c, 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw, kh <= h, kw <= w
     , EngineShape (kh * kw * c) f p b ch g, KnownNat l, TableRegs t
     , Accumulates ai af wi wf bi bf ci cf
     , NFDataX o )
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> SNat p
  -> SNat b
  -> SNat l
  -> WindowQueue dom (Vec (kh * kw * c) (SFixed ai af))
  -> mem (g * b) p ch (SFixed wi wf) (SFixed bi bf)
  -> Finish t (SFixed ci cf) o
  -> Stream dom (Vec c (SFixed ai af)) (Vec f o)
conv2d h w kh kw sh sw p b l queue weights finish =
  windowsInto h w kh kw sh sw flattenWindow queue
    (\loading -> engineFrom p b l loading weights finish)
