{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Nearest-neighbour upsampling of a raster image stream (Keras @UpSampling2D@
with @interpolation="nearest"@, and @UpSampling1D@ as an image one row high):
each pixel is repeated @sw@ times along its row and each row @sh@ times, so an
@h x w@ image becomes @(sh * h) x (sw * w)@. Output pixel @(r, x)@ is input
pixel @(r \`div\` sh, x \`div\` sw)@. No arithmetic: the values are moved.

= Why it looks like this

Per input row the block emits @sh * w * sw@ beats in raster order: beat
@(i, x, j)@ (copy @i@ of the row, column @x@, copy @j@ of the pixel) for
@i < sh@, @x < w@, @j < sw@, @j@ fastest. Its source is

* @(0, x, 0)@: input pixel @x@ of the row, taken from the input as it arrives
  and written to word @x@ of a one-row line buffer (block RAM);
* @(i, x, 0)@, @i > 0@: word @x@ of the line buffer (read one cycle ahead at
  the column of the next beat, known from the registered beat counter; with
  @w = 1@ the pixel is still in the output register);
* @(i, x, j)@, @j > 0@: the output register itself (the same pixel again).

So only one input row is stored, never a frame, and no row waits: copy 0 of a
row streams out while the row arrives.

= Storage

* line buffer (block RAM): @w * c * BitSize a@ bits;
* output register: @c * BitSize a@ bits;
* control: the beat counter (@Index sh@, @Index w@, @Index sw@) and a flag.

= Protocol and exact timing

The output is the output register. It loads the next beat in a cycle where it
is empty or its beat moves (@advance = not full || readyOut@); the beat then
is valid the next cycle. A beat from the input loads only with the input
valid, and that is the cycle the input pixel moves. Input ready is
@advance@ while the next beat is an input beat, low otherwise: combinational
on downstream's ready (like "K2C.Pad"), never on the input's valid.

* Beat @k@ loads in @L_k = max(offer_k, M_(k-1))@ for an input beat (offered
  from @offer_k@) and in @L_k = M_(k-1)@ otherwise, where @M_(k-1)@ is the
  cycle beat @k - 1@ moved (the first beat after reset: its offer cycle); it
  is valid from @L_k + 1@.
* With downstream always ready and no input gaps, one beat per cycle: an input
  row of @w@ pixels takes @sh * w * sw@ cycles, and copy 0 of a pixel leaves
  one cycle after the pixel arrives.
-}
module K2C.Upsample
  ( upsample
    -- * The raster control it shares with "K2C.Interleave"
  , Beat
  , Raster (..)
  , raster
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | Beat counter: copy of the row, column, copy of the pixel (fastest last).
type Beat sh w sw = (Index sh, Index w, Index sw)

-- | The control of a block that outputs @sh x sw@ beats per input pixel in raster order
-- (the rules in the module header), the beat loaded from the input or from its store.
data Raster dom sh w sw = Raster
  { rBeat      :: Signal dom (Beat sh w sw)  -- ^ the beat loading next
  , rNextBeat  :: Signal dom (Beat sh w sw)  -- ^ the beat after this cycle
  , rFull      :: Signal dom Bool            -- ^ the output register holds a beat
  , rFromInput :: Signal dom Bool            -- ^ the next beat reads the input
  , rReadyIn   :: Signal dom Bool
  , rAccepted  :: Signal dom Bool            -- ^ an input pixel moves
  , rLoads     :: Signal dom Bool            -- ^ the output register loads the next beat
  }

-- | The raster control from the input's valid and downstream's ready.
raster
  :: forall dom sh w sw
   . (HiddenClockResetEnable dom, KnownNat sh, KnownNat w, KnownNat sw, 1 <= w, 1 <= sh, 1 <= sw)
  => Signal dom Bool -> Signal dom Bool -> Raster dom sh w sw
raster inputValid readyOut = Raster beat nextBeat full fromInput readyIn accepted loads
  where
    beat      = register (0, 0, 0) nextBeat
    nextBeat  = mux loads (following <$> beat) beat
    full      = register False (loads .||. (full .&&. (not <$> readyOut)))
    advance   = (not <$> full) .||. readyOut
    fromInput = isInputBeat <$> beat
    readyIn   = advance .&&. fromInput
    accepted  = readyIn .&&. inputValid
    loads     = advance .&&. ((not <$> fromInput) .||. inputValid)

-- | Repeat each pixel of a @w@-pixel-wide image stream @sw@ times across and
-- each row @sh@ times down (see the module header).
upsample
  :: forall dom w sh sw c a
   . ( HiddenClockResetEnable dom
     , KnownNat w, KnownNat sh, KnownNat sw, KnownNat c
     , 1 <= w, 1 <= sh, 1 <= sw, NFDataX a )
  => SNat w -> SNat sh -> SNat sw -> Stream dom (Vec c a) (Vec c a)
upsample SNat SNat SNat (input, readyOut) = (output, readyIn)
  where
    Raster beat nextBeat full fromInput readyIn accepted loads =
      raster @dom @sh @w @sw (isJust <$> input) readyOut
    -- Only a row's first copy of a pixel comes from the line buffer (w > 1).
    fromRam   = (\(i, _, j) -> i /= 0 && j == 0 && natToNum @w > (1 :: Integer)) <$> beat
    pixel     = fromJustX <$> input
    newValue  = mux fromInput pixel (mux fromRam ramWord value)
    value     = regEn (deepErrorX "upsample: no pixel yet") loads newValue
    output    = mux full (Just <$> value) (pure Nothing)
    column (_, x, _) = x
    write     = mux accepted (Just <$> bundle (column <$> beat, pixel)) (pure Nothing)
    ramWord   = blockRam (repeat @w (deepErrorX "upsample: line buffer unwritten"))
                         (column <$> nextBeat) write

-- | Whether a beat is copy 0 of a pixel in copy 0 of its row: it reads the input.
isInputBeat :: (KnownNat sh, KnownNat w, KnownNat sw) => Beat sh w sw -> Bool
isInputBeat (i, _, j) = i == 0 && j == 0

-- | The next beat in raster order: pixel copy, then column, then row copy.
following :: (KnownNat sh, KnownNat w, KnownNat sw) => Beat sh w sw -> Beat sh w sw
following (i, x, j)
  | j /= maxBound = (i, x, j + 1)
  | x /= maxBound = (i, x + 1, 0)
  | otherwise     = (nextIndex i, 0, 0)
