{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The stride phases of a transposed convolution into raster order (depth to
space): an input pixel of @sh * sw * c@ values, phase @(rh, rw)@ in values
@(rh * sw + rw) * c ..@ (the phase convolution's filters, Keras
@Conv2DTranspose@ and @Conv1DTranspose@ as keras2clash builds them), becomes
the @sh x sw@ block of output pixels @(q * sh + rh, p * sw + rw)@ of @c@
values each; an @hq x w@ image becomes @(sh * hq) x (sw * w)@. No arithmetic:
the values are moved.

= Why it looks like this

Per input row the block emits @sh * w * sw@ beats in raster order: beat
@(i, x, j)@ (output row @i@ of the input row, column @x@, phase column @j@)
for @i < sh@, @x < w@, @j < sw@, @j@ fastest. Its source is

* @(0, x, 0)@: input pixel @x@ of the row, taken from the input as it arrives:
  its row-0 phases go to the output register, its rows @1 .. sh - 1@ to word
  @x@ of a one-row line buffer (block RAM);
* @(i, x, 0)@, @i > 0@: row @i@ of word @x@ of the line buffer (read one cycle
  ahead at the column of the next beat, known from the registered beat
  counter; with @w = 1@ the word is a register);
* @(i, x, j)@, @j > 0@: the output register rotated by one phase.

So only one input row's later phase rows are stored, never a frame, and no
row waits: output row 0 streams out while the input row arrives. The input
waits while rows @1 .. sh - 1@ leave; a second row buffer would let it run
on, but the output (one beat a cycle, @sh * sw@ per input pixel) is the
layer's pace whenever the phase convolution keeps up, and the engine's
output queue bridges the wait otherwise (a 2x2 interleave of a 4x3 image
behind an engine of 4 steps a window: an interval of 51 cycles against 48). These are
the beat order and the rules of "K2C.Upsample" (which repeats a pixel where
this block takes the next phase), so the timing below is the same.

= Storage

* line buffer (block RAM, @w > 1@ and @sh > 1@): @w * (sh - 1) * sw * c *
  BitSize a@ bits (a register of @(sh - 1) * sw * c@ values for @w = 1@);
* output register: @sw * c * BitSize a@ bits (one output row's phases of a
  pixel; the output is its first phase);
* control: the beat counter (@Index sh@, @Index w@, @Index sw@) and a flag.

= Protocol and exact timing

The output is the output register's first phase. It loads the next beat in a
cycle where it is empty or its beat moves (@advance = not full || readyOut@);
the beat then is valid the next cycle. A beat from the input loads only with
the input valid, and that is the cycle the input pixel moves. Input ready is
@advance@ while the next beat is an input beat, low otherwise: combinational
on downstream's ready (like "K2C.Pad"), never on the input's valid.

* Beat @k@ loads in @L_k = max(offer_k, M_(k-1))@ for an input beat (offered
  from @offer_k@) and in @L_k = M_(k-1)@ otherwise, where @M_(k-1)@ is the
  cycle beat @k - 1@ moved (the first beat after reset: its offer cycle); it
  is valid from @L_k + 1@.
* With downstream always ready and no input gaps, one beat per cycle: an input
  row of @w@ pixels takes @sh * w * sw@ cycles, and phase @(0, 0)@ of a pixel
  leaves one cycle after the pixel arrives.
-}
module K2C.Interleave
  ( interleave
  ) where

import Clash.Prelude hiding (interleave)
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Upsample (Raster (..), raster)

-- | The @sh x sw@ phases of each pixel of a @w@-pixel-wide image stream as
-- @sh x sw@ blocks of output pixels (see the module header).
interleave
  :: forall dom w sh sw c a
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat sh, KnownNat sw, KnownNat c
     , 1 <= w, 1 <= sh, 1 <= sw, NFDataX a )
  => SNat w -> SNat sh -> SNat sw -> Stream dom (Vec (sh * sw * c) a) (Vec c a)
interleave SNat SNat SNat (input, readyOut) = (output, readyIn)
  where
    -- The beat counter (output row of the input row, column, phase column) and the
    -- handshake are those of "K2C.Upsample".
    Raster beat nextBeat full fromInput readyIn accepted loads =
      raster @dom @sh @w @sw (isJust <$> input) readyOut
    phases :: Signal dom (Vec sh (Vec sw (Vec c a)))
    phases    = (map (unconcatI @sw @c) . unconcatI @sh @(sw * c)) . fromJustX <$> input
    firstRow  = head <$> phases
    laterRows = tail <$> phases
    -- A row's first beat of a pixel in output rows 1 .. sh - 1 comes from the line buffer.
    fromRam   = (\(i, _, j) -> i /= 0 && j == 0) <$> beat
    stored    = (\rows (i, _, _) -> (deepErrorX "interleave: row 0 is not stored" :> rows) !! i)
                <$> lineWord <*> beat
    rotated   = (`rotateLeftS` d1) <$> chunk
    newChunk  = mux fromInput firstRow (mux fromRam stored rotated)
    chunk     = regEn (deepErrorX "interleave: no pixel yet") loads newChunk
    output    = mux full (Just . (!! (0 :: Index sw)) <$> chunk) (pure Nothing)
    column (_, x, _) = x
    -- One column: the word is written and read in different cycles but may
    -- be read the cycle after its write, which a block RAM would answer with
    -- the old word; a register answers the new one.
    lineWord :: Signal dom (Vec (sh - 1) (Vec sw (Vec c a)))
    lineWord
      | natToNum @w == (1 :: Integer) || natToNum @sh == (1 :: Integer) =
          regEn (deepErrorX "interleave: nothing stored") accepted laterRows
      | otherwise =
          blockRam (repeat @w (deepErrorX "interleave: line buffer unwritten"))
                   (column <$> nextBeat)
                   (mux accepted (Just <$> bundle (column <$> beat, laterRows)) (pure Nothing))
