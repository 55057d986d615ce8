{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Constant padding of a raster image stream: an @h x w@ image in becomes an
@(top + h + bottom) x (left + w + right)@ image out, the new border filled
with a constant pixel (every channel the given value: 0 before a convolution,
'minBound' before a max pool).

= Why it looks like this

The block holds no data, only the raster position of the next /output/ pixel.
Inside the original image it is a wire (like 'K2C.Stream.mapS'): the output is
the input and the input's ready is downstream's ready. On the border it shows
the pad pixel itself and holds its input (ready low). So it adds no latency and
no storage, and the ready path stays loop-free: input ready is
@inside && readyOut@, combinational on downstream's ready (by design, like
'mapS') but never on the input's valid. Place it in front of a block with a
registered ready (e.g. "K2C.Window") and the combinational path ends there.

Sides with no padding cost nothing: whether an axis is padded at all is a
constant, so an unpadded axis has no comparators (its counter then drives
nothing and synthesis removes it), and with no padding anywhere the block is
exactly a wire (checked in test/stream/Tops.hs: @pad_none_top@).

= Timing

Zero latency. With downstream always ready and the input never idle, one output
pixel per cycle: an image takes @(top + h + bottom) * (left + w + right)@
cycles, of which the @h * w@ inside ones move an input pixel. Pad pixels
are produced whether or not the input is valid, so they never wait for input:
after an image, the next image's leading pad pixels (its @top@ rows and the
@left@ pixels of its first row) are offered before its first pixel arrives.
Control: counters @Index (top + h + bottom)@ and @Index (left + w + right)@
holding the position after the current pixel, an inside-the-image flag for
the current pixel and one for the next, all loaded when a pixel moves.
-}
module K2C.Pad
  ( pad
  ) where

import Clash.Prelude
import Data.Maybe (isJust)
import qualified Prelude as P

import K2C.Stream (Stream)
import K2C.Window (nextPosition)

-- | Pad an @h x w@ image stream by @top@, @bottom@, @left@ and @right@ pixels
-- of the constant @value@ (in every channel).
pad
  :: forall dom h w top bottom left right c a
   . ( HiddenClockResetEnable dom
     , KnownNat h, KnownNat w, KnownNat top, KnownNat bottom
     , KnownNat left, KnownNat right, KnownNat c
     , 1 <= h, 1 <= w )
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> a
  -> Stream dom (Vec c a) (Vec c a)
pad h w top bottom left right value (input, readyOut)
  | noPadding = (input, readyOut)
  | otherwise = (output, readyIn)
  where
    noPadding = P.all (== 0) [ snatToInteger top, snatToInteger bottom
                             , snatToInteger left, snatToInteger right ]
    -- The position after the current output pixel and whether it lies inside,
    -- both registered and taken when a pixel moves: what a move changes is
    -- only the clock enable of these registers, so downstream's ready (a
    -- window's ready, itself logic) meets no counter and no comparator on its
    -- way (mobilenet_digits on ECP5: ready -> the position's increment -> its
    -- comparators -> the flag would be its 9.95 ns critical path, 5 levels).
    -- (Not named "inside": a SystemVerilog keyword, and Clash names the
    -- register after it.)
    inImage     = register (isIn origin) (mux moved nextInImage inImage)
    following   = register (nextPosition origin) (mux moved (nextPosition <$> following) following)
    nextInImage = register (isIn (nextPosition origin))
                           (mux moved (isIn . nextPosition <$> following) nextInImage)
    isIn     = isInside h w top bottom left right
    origin   = (0 :: Index (top + h + bottom), 0 :: Index (left + w + right))
    output   = mux inImage input (pure (Just (repeat value)))
    readyIn  = inImage .&&. readyOut
    moved    = (isJust <$> output) .&&. readyOut

-- | Whether an output position lies in the original image. An axis with no
-- padding is inside everywhere (a constant, so no comparators are built).
isInside
  :: (KnownNat ho, KnownNat wo)
  => SNat h -> SNat w -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> (Index ho, Index wo) -> Bool
isInside h w top bottom left right (r, x) =
  inAxis h top bottom r && inAxis w left right x

-- | One axis of 'isInside': @before <= p < before + n@. A side with no padding
-- has no comparator (it would be constant: Verilator's lint rejects @p >= 0@).
inAxis :: KnownNat m => SNat n -> SNat before -> SNat after -> Index m -> Bool
inAxis n before after p
  | first == 0 && trailing == 0 = True
  | first == 0                  = p <= fromInteger lastInside
  | trailing == 0               = p >= fromInteger first
  | otherwise                   = p >= fromInteger first && p <= fromInteger lastInside
  where
    first      = snatToInteger before
    trailing   = snatToInteger after
    lastInside = first + snatToInteger n - 1
