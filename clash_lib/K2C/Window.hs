{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType, ConstraintKinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The line-buffer window generator: turns a raster stream of pixels into the
stream of @kh x kw@ windows of a /valid/ convolution with strides @(sh, sw)@.

An image is @h * w@ beats of @Vec c a@ in raster order; images follow each
other with no reset. Output @(i, j)@, @i < h2 = (h - kh) \`div\` sh + 1@,
@j < w2 = (w - kw) \`div\` sw + 1@, covers input rows @i*sh .. i*sh+kh-1@ and
columns @j*sw .. j*sw+kw-1@; its element @[r][s]@ is input pixel
@(i*sh + r, j*sw + s)@. Windows come out in raster order of @(i, j)@. Input rows
and columns past the last window position are consumed and ignored.

= Why it looks like this

Only the last @kh - 1@ rows are kept (line buffers), not frames. For each
column @x@ one block-RAM word holds that column's pixels of the previous
@kh - 1@ rows. When pixel @(r, x)@ arrives, the word of column @x@ plus the pixel
form the window's newest column (rows @r-kh+1 .. r@); it is shifted into the
window shift register, and its lower @kh - 1@ pixels are written back as the
word of column @x@ for the next row. The RAM is read one cycle ahead at the
column after the next pixel's, from an address register of its own, and the
word of the next pixel's column is kept in a register: when a pixel is
accepted the read word becomes the current one, otherwise the kept one stays
(its column was neither left nor written). So the word is waiting whenever
that pixel shows up, however many idle cycles come first, and the RAM's read
address, a net to every LUT-RAM slice of a wide line buffer, starts at a
flip-flop, not at the input handshake (cnn_variants on ECP5: the handshake ->
the read address's multiplexer and decoders, 45 tiles out and back, 11.3 ns).
(Clash's 'blockRam' returns the old word when reading and writing one address
in the same cycle; only @w = 1@ does that, and there a one-word bypass
register supplies the fresh word.)

The shift register is also the output: a window is offered in the cycle its
last pixel moves in (the shifted value, through one multiplexer), and if
downstream does not take it then, it waits in the shift register (@pending@)
and no pixel moves in until it goes. Downstream (an engine, a window queue,
a pooling pipe) has a register of its own for what it takes, so a second
copy here (an output register) would only duplicate it: @K@ more
flip-flops per window generator (resnet_digits: 1,200-1,760 per 3x3
convolution). An engine loads from the shift register itself, the cycle
after it took the window ('windowHeld', 'intoHeld'): the register still
holds it then, and loading the offer would put the multiplexer, the pending
flag and the new column before every bit of the engine's window.

= Storage

* line buffer (block RAM): @w * (kh - 1) * c * BitSize a@ bits;
* window shift register: @kh * kw * c * BitSize a@ bits;
* the kept line-buffer word: @(kh - 1) * c * BitSize a@ bits;
* control: position counters (@Index h@, @Index w@), stride phase counters
  (@Index sh@, @Index sw@), the read address (@Index w@), three flags, and for
  @w = 1@ only, a bypass of @(kh - 1) * c * BitSize a@ bits.

= Protocol and exact timing

Input ready is @not pending@: registered state, independent of the input's
valid and of downstream's ready. Output valid is @pending@, or the input's
valid when the pixel at the position completes a window (a registered flag):
it depends on the input's valid, never on downstream's ready.

* A pixel accepted in cycle @t@ that completes a window offers that window in
  cycle @t@; if it moves in a cycle @M >= t@, input ready is low from @t + 1@
  to @M@ and the next pixel can move from @M + 1@.
* First window: @(kh - 1) * w + kw - 1@ pixels after the image's first
  pixel; with no input gaps it is offered @(kh - 1) * w + kw - 1@ cycles after
  the first pixel was accepted.
* Throughput: with downstream always ready the block never stalls its input:
  one pixel per cycle, images back to back.
* The last window of an image is completed by pixel
  @((h2 - 1) * sh + kh - 1, (w2 - 1) * sw + kw - 1)@, which comes
  @d = (h - 1 - (h2 - 1) * sh - kh + 1) * w + (w - 1 - (w2 - 1) * sw - kw + 1)@
  pixels before the image's last pixel. With downstream ready it is offered
  in that pixel's cycle, @-d@ cycles from the image's last pixel when the
  input has no gaps (@d = 0@ when the windows tile the image exactly).
-}
module K2C.Window
  ( WindowShape
  , HeldWindows
  , window
  , windowHeld
  , intoHeld
  , nextPosition
  , nextIndex
  ) where

import Clash.Prelude hiding (window)
import Data.Maybe (isJust)

import K2C.Stream (Stream)

-- | What a window generator's sizes must satisfy: an @h x w@ image of @c@
-- channels, @kh x kw@ windows that fit in it, strides @(sh, sw)@.
type WindowShape h w kh kw sh sw c =
  ( KnownNat h, KnownNat w, KnownNat kh, KnownNat kw, KnownNat sh, KnownNat sw, KnownNat c
  , 1 <= kh, 1 <= kw, 1 <= sh, 1 <= sw, kh <= h, kw <= w )

-- | A stream of windows @win@ from beats @a@ and, beside it, the register
-- holding the last window ('windowHeld').
type HeldWindows dom a win
  =  (Signal dom (Maybe a), Signal dom Bool)
  -> ((Signal dom (Maybe win), Signal dom Bool), Signal dom win)

-- | The window generator; see the module header for geometry and timing.
window
  :: forall dom h w kh kw sh sw c a
   . (HiddenClockResetEnable dom, WindowShape h w kh kw sh sw c, NFDataX a)
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> Stream dom (Vec c a) (Vec kh (Vec kw (Vec c a)))
window h w kh kw sh sw = fst . windowHeld h w kh kw sh sw

-- | The window generator and, beside its stream, the shift register itself.
-- In the cycle after a window moved the register still holds it (the next
-- pixel moves in at the end of that cycle at the earliest: input ready is
-- @not pending@, registered), so a consumer can load the window from there
-- instead of from the offer's multiplexer ('K2C.Engine.afterAccept').
windowHeld
  :: forall dom h w kh kw sh sw c a
   . (HiddenClockResetEnable dom, WindowShape h w kh kw sh sw c, NFDataX a)
  => SNat h -> SNat w -> SNat kh -> SNat kw -> SNat sh -> SNat sw
  -> HeldWindows dom (Vec c a) (Vec kh (Vec kw (Vec c a)))
windowHeld SNat SNat kh kw SNat SNat (input, readyOut) = ((output, readyIn), windowReg)
  where
    position :: Signal dom (Position h w sh sw)
    position  = register origin positionNext
    positionNext = mux accepted (advance kh kw <$> position) position
    origin    = Position (Axis 0 0) (Axis 0 0)
    -- Whether the pixel at the position completes a window, registered from
    -- the next position (the same value in every cycle): the comparators stay
    -- off the path from the input's valid to the output's valid, which drives
    -- wide clock enables downstream (with the comparators on it, a clock
    -- enable of @kh * kw * c@ values takes 23.5 ns: mobilenet_digits on ECP5).
    endsWindow = register (completesWindow kh kw origin) (completesWindow kh kw <$> positionNext)
    -- A completed window that downstream did not take in the cycle its last
    -- pixel came waits in the shift register; no pixel moves in until it goes.
    pending   = register False pendingNext
    pendingNext = mux pending (not <$> readyOut) (completes .&&. (not <$> readyOut))

    readyIn   = not <$> pending
    -- 1 x 1 windows: every pixel the register holds is a whole window, needed only while it
    -- waits (pending) and the cycle after it moved, so the register loads whenever no window
    -- waits: its clock enable is a flip-flop of its own (which place and route can copy next
    -- to its readers), not the handshake's gate (an engine's wide window register behind that
    -- gate: 8.7 ns of route on ECP5, the transformer's projections)
    loads
      | natToNum @kh == (1 :: Int) && natToNum @kw == (1 :: Int) = register True (not <$> pendingNext)
      | otherwise = accepted
    accepted  = readyIn .&&. (isJust <$> input)
    completes = accepted .&&. endsWindow

    pixel     = fromJustX <$> input
    newColumn :: Signal dom (Vec kh (Vec c a))
    newColumn = (:<) <$> lineBuffer @dom @w @(kh - 1) (column <$> position) (column <$> positionNext)
                                    accepted newColumn
                     <*> pixel
    shifted   = zipWith (<<+) <$> windowReg <*> newColumn
    -- Datapath registers have no reset: the flags alone say what they hold.
    windowReg = delayEn (deepErrorX "window: no pixel yet") loads shifted
    -- The window the completing pixel makes, in that pixel's cycle; or the
    -- waiting one. The data's select is the 'pending' flip-flop.
    output    = mux pending (Just <$> windowReg) (mux completes (Just <$> shifted) (pure Nothing))

-- | A window generator with its shift register ('windowHeld') into a
-- consumer that loads what it accepted from that register a cycle later,
-- with @f@ (wires: a regrouping of the window) applied to both.
intoHeld
  :: HeldWindows dom px win
  -> (win -> x)
  -> (Signal dom x -> Stream dom x y)
  -> Stream dom px y
intoHeld generator f consumer (input, readyOut) = (output, readyIn)
  where
    ((windows, readyIn), held) = generator (input, readyMid)
    (output, readyMid)         = consumer (f <$> held) (fmap f <$> windows, readyOut)

-- | The line buffers: word @x@ holds column @x@ of the last @kh - 1@ rows.
-- Given the column of the next pixel, that of the pixel after it (the next
-- position's), whether the pixel is accepted this cycle, and the new column
-- (rows @r-kh+1 .. r@), it answers the stored word of the current column.
lineBuffer
  :: forall dom w n c a
   . (HiddenClockResetEnable dom, KnownNat w, KnownNat n, KnownNat c, NFDataX a)
  => Signal dom (Index w)
  -> Signal dom (Index w)
  -> Signal dom Bool
  -> Signal dom (Vec (n + 1) (Vec c a))
  -> Signal dom (Vec n (Vec c a))
lineBuffer col colNext accepted newColumn = word
  where
    -- The column after the next pixel's, a register: the read a cycle ahead.
    readCol   = register (nextIndex 0) (nextIndex <$> colNext)
    writeWord = tail <$> newColumn
    write     = mux accepted (Just <$> bundle (col, writeWord)) (pure Nothing)
    ramWord   = blockRam (repeat @w (deepErrorX "window: line buffer unwritten")) readCol write
    -- After an accepted pixel the read word is the new column's; otherwise the
    -- column stayed and so did its word. The choice is a flip-flop.
    moved     = register False accepted
    kept      = delay (deepErrorX "window: nothing read") word
    word      = mux bypass written (mux moved ramWord kept)
    -- Only with one column can the read meet last cycle's write.
    oneColumn = natToNum @w == (1 :: Integer)
    bypass    = (oneColumn &&) <$> moved
    written   = delay (deepErrorX "window: nothing written") writeWord

-- | Where the next pixel goes along one axis of length @n@ with windows
-- placed every @s@ positions: its index, and its stride phase
-- @(index - (k - 1)) `mod` s@ (kept as a counter, so no divider is built;
-- it is 0 while @index < k - 1@).
data Axis n s = Axis { axisIndex :: Index n, axisPhase :: Index s }
  deriving (Eq, Show, Generic, NFDataX)

-- | The raster position of the next pixel: row axis and column axis.
data Position h w sh sw = Position (Axis h sh) (Axis w sw)
  deriving (Eq, Show, Generic, NFDataX)

-- | Whether this index is the last one of a window of size @k@. (With
-- @k = 1@ every index qualifies by size; the comparison is left out so that
-- no constant-true comparator reaches the HDL.)
axisEnd :: (KnownNat n, KnownNat s) => SNat k -> Axis n s -> Bool
axisEnd k (Axis i phase)
  | snatToInteger k == 1 = phase == 0
  | otherwise            = i >= lastOfFirst k && phase == 0

-- | Step to the next index, wrapping to 0 at the end of the axis.
advanceAxis :: (KnownNat n, KnownNat s) => SNat k -> Axis n s -> Axis n s
advanceAxis k (Axis i phase) = Axis next phase'
  where
    next   = nextIndex i
    phase' | next <= lastOfFirst k = 0
           | otherwise             = nextIndex phase

-- | Index of the last row (column) of the first window: @k - 1@.
lastOfFirst :: KnownNat n => SNat k -> Index n
lastOfFirst k = fromInteger (snatToInteger k - 1)

-- | Whether the pixel at this position completes a window.
completesWindow
  :: (KnownNat h, KnownNat w, KnownNat sh, KnownNat sw)
  => SNat kh -> SNat kw -> Position h w sh sw -> Bool
completesWindow kh kw (Position row col) = axisEnd kh row && axisEnd kw col

-- | The next pixel's position, wrapping at the image end. The column axis
-- always steps (it wraps by itself); the row axis steps when the column wraps.
--
-- Written so that 'advanceAxis' is not applied in two branches of one case:
-- Clash 1.6.4 merges such calls (disjoint expression consolidation) and, when
-- both axes have the same type, generated Verilog that fed a wrong constant
-- to the column step (caught by test/stream's Icarus replay).
advance
  :: (KnownNat h, KnownNat w, KnownNat sh, KnownNat sw)
  => SNat kh -> SNat kw -> Position h w sh sw -> Position h w sh sw
advance kh kw (Position row col) = Position row' (advanceAxis kw col)
  where
    row' = if axisIndex col == maxBound then advanceAxis kh row else row

-- | Next raster position, wrapping at the image end.
nextPosition :: (KnownNat h, KnownNat w) => (Index h, Index w) -> (Index h, Index w)
nextPosition (r, x)
  | x /= maxBound = (r, x + 1)
  | otherwise     = (nextIndex r, 0)

-- | The column of a position.
column :: Position h w sh sw -> Index w
column (Position _ (Axis x _)) = x

-- | Successor that wraps to 0.
nextIndex :: KnownNat n => Index n -> Index n
nextIndex i = if i == maxBound then 0 else i + 1
