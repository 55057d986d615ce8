{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType, RankNTypes, ConstraintKinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=8 #-}
{-|
Max and average pooling: the window generator ("K2C.Window") followed by a
combinational per-channel reduction of each window ('K2C.Stream.mapS').

= Arithmetic (docs/architecture.md, "Arithmetic of the new layers")

* Max: per channel maximum of the @N = ph * pw@ window values (exact; a
  balanced tree of comparators).
* Average: per channel, on raw integers, @floor ((2 * sum + N) / (2 * N))@: round
  to nearest, ties toward +infinity, exact. The sum is taken in
  @Signed (i + f + CLog 2 ph + CLog 2 pw + 2)@, wide enough for @2 * sum + N@ (no overflow,
  no saturation). When @2 * N@ is a power of two the division is an arithmetic
  shift right; otherwise a division by a constant is built. The result is an
  average of in-range values, so it is in range: no saturation needed.

'Same' padding is not built in: put "K2C.Pad" in front ('minBound' for max).
Keras' average over only the non-padding values is not supported.

= Timing, storage, protocol

Exactly those of 'K2C.Window.window' with @(kh, kw) = (ph, pw)@: the reduction
adds no register and no latency (the window output register feeds it), and
the ready is the window's registered ready.

(@-fconstraint-solver-iterations=8@ above: GHC's default of 4 runs out while
the typelits plugins solve the 'KnownNat' of the wide sum type.)
-}
module K2C.Pool
  ( maxPool
  , avgPool
  , windowMax
  , windowAverage
  , reduceWindow
  ) where

import Clash.Prelude hiding (window)

import K2C.Stream (Stream, mapS, (|>))
import K2C.Window (window)

-- | The constraints every pooling layer needs.
type PoolSize dom h w ph pw sh sw c i f =
  ( HiddenClockResetEnable dom
  , KnownNat h, KnownNat w, KnownNat ph, KnownNat pw
  , KnownNat sh, KnownNat sw, KnownNat c, KnownNat i, KnownNat f
  , 1 <= ph, 1 <= pw, 1 <= sh, 1 <= sw, ph <= h, pw <= w )

-- | Max pooling, @ph x pw@ windows with strides @(sh, sw)@, 'valid' padding.
maxPool
  :: forall dom h w ph pw sh sw c i f
   . PoolSize dom h w ph pw sh sw c i f
  => SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
maxPool h w ph pw sh sw = window h w ph pw sh sw |> mapS windowMax

-- | Average pooling, @ph x pw@ windows with strides @(sh, sw)@, 'valid' padding.
avgPool
  :: forall dom h w ph pw sh sw c i f
   . PoolSize dom h w ph pw sh sw c i f
  => SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
avgPool h w ph pw sh sw = window h w ph pw sh sw |> mapS windowAverage

-- | Per channel maximum of a window.
windowMax
  :: forall ph pw c a . (KnownNat c, 1 <= ph, 1 <= pw, Ord a)
  => Vec ph (Vec pw (Vec c a)) -> Vec c a
windowMax = reduceWindow max

-- | Per channel rounded average of a window (see the module header).
windowAverage
  :: forall ph pw c i f
   . (KnownNat ph, KnownNat pw, KnownNat c, KnownNat i, KnownNat f, 1 <= ph, 1 <= pw)
  => Vec ph (Vec pw (Vec c (SFixed i f))) -> Vec c (SFixed i f)
windowAverage = map (fromWide . roundedQuotient (SNat @(ph * pw)))
              . reduceWindow @ph @pw (+) . map (map (map toWide))
  where
    toWide :: SFixed i f -> WideSum i f ph pw
    toWide = resize . unSF
    fromWide :: WideSum i f ph pw -> SFixed i f
    fromWide = sf (SNat @f) . resize @Signed @(i + f + CLog 2 ph + CLog 2 pw + 2) @(i + f)

-- | Wide enough for @2 * sum + N@ of @N = ph * pw@ values of @SFixed i f@.
type WideSum i f ph pw = Signed (i + f + CLog 2 ph + CLog 2 pw + 2)

-- | Per channel balanced-tree reduction of a window with an associative,
-- commutative operator: first along each row, then down the rows.
reduceWindow
  :: forall ph pw c a . (KnownNat c, 1 <= ph, 1 <= pw)
  => (a -> a -> a) -> Vec ph (Vec pw (Vec c a)) -> Vec c a
reduceWindow op = reduceAxis . map reduceAxis
  where
    reduceAxis :: forall n . (KnownNat c, 1 <= n) => Vec n (Vec c a) -> Vec c a
    reduceAxis vs = map (\xs -> leToPlus @1 @n (fold op xs)) (transpose vs)

-- | @floor ((2 * s + n) / (2 * n))@; a shift when @2 * n@ is a power of two.
roundedQuotient :: forall n m . KnownNat m => SNat n -> Signed m -> Signed m
roundedQuotient n s
  | popCount divisor == 1 = shiftR numerator (countTrailingZeros divisor)
  | otherwise             = numerator `div` fromIntegral divisor
  where
    count     = snatToNum n :: Int
    divisor   = 2 * count
    numerator = 2 * s + fromIntegral count
