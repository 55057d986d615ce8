{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Cropping of a raster image stream (Keras @Cropping2D@, and @Cropping1D@ as an
image one row high): an @h x w@ image in becomes the
@(h - top - bottom) x (w - left - right)@ image of the pixels inside the kept
rectangle, in raster order. No arithmetic: the kept beats pass unchanged.

= Why it looks like this

The block holds no data, only the raster position of the next /input/ pixel.
Inside the kept rectangle it is a wire (like 'K2C.Stream.mapS'): the output is
the input and the input's ready is downstream's ready. Outside it the output is
empty and the input's ready is high, so a dropped pixel moves (and vanishes) in
the cycle it is offered, whatever downstream does. Input ready is
@not kept || readyOut@: combinational on downstream's ready (like "K2C.Pad"),
never on the input's valid. Storage: none; control: counters @Index h@ and
@Index w@.

= Exact timing

Zero latency. A kept pixel offered in cycle @t@ is offered downstream in cycle
@t@ and moves when downstream takes it; a dropped pixel moves in the cycle it is
offered. With downstream always ready the input never stalls: one pixel per
cycle, images back to back.
-}
module K2C.Crop
  ( crop
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Window (nextPosition)

-- | Keep the pixels of an @h x w@ image that are not in the @top@ first rows,
-- the @bottom@ last rows, the @left@ first columns or the @right@ last columns.
crop
  :: forall dom h w top bottom left right c a
   . ( HiddenClockResetEnable dom
     , KnownNat h, KnownNat w, KnownNat top, KnownNat bottom
     , KnownNat left, KnownNat right
     , 1 <= h, 1 <= w )
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> Stream dom (Vec c a) (Vec c a)
crop h w top bottom left right (input, readyOut) = (output, readyIn)
  where
    position :: Signal dom (Index h, Index w)
    position = register (0, 0) (mux accepted (nextPosition <$> position) position)
    kept     = isKept h w top bottom left right <$> position
    output   = mux kept input (pure Nothing)
    readyIn  = (not <$> kept) .||. readyOut
    accepted = (isJust <$> input) .&&. readyIn

-- | Whether an input position lies in the kept rectangle. An axis with no
-- cropping keeps everything (a constant, so no comparators are built).
isKept
  :: (KnownNat h, KnownNat w)
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> (Index h, Index w) -> Bool
isKept h w top bottom left right (r, x) =
  inAxis h top bottom r && inAxis w left right x

-- | One axis of 'isKept': @before <= p < n - after@. A side with no cropping has
-- no comparator (it would be constant: Verilator's lint rejects @p >= 0@).
inAxis :: KnownNat n => SNat n -> SNat before -> SNat after -> Index n -> Bool
inAxis n before after p
  | first == 0 && trailing == 0 = True
  | first == 0                  = p <= fromInteger final
  | trailing == 0               = p >= fromInteger first
  | otherwise                   = p >= fromInteger first && p <= fromInteger final
  where
    first    = snatToInteger before
    trailing = snatToInteger after
    final    = snatToInteger n - 1 - trailing
