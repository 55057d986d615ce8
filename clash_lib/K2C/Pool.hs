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
  to nearest, ties toward +infinity, exact. @N = ph * pw@ ('avgPool'), or with
  Keras 'same' padding ('avgPoolSame') the window's count of non-padding values,
  @N = rows * cols@, which depends on the output position only. The sum is taken in
  @Signed (i + f + CLog 2 ph + CLog 2 pw + 2)@, wide enough for @2 * sum + N@ (no overflow,
  no saturation). When @2 * N@ is a power of two the division is an arithmetic
  shift right; otherwise a division by a constant is built. The result is an
  average of in-range values, so it is in range: no saturation needed.

'Same' padding is not built in: put "K2C.Pad" in front ('minBound' for max,
zeros for average). 'avgPoolSame' then divides each window by its count of
non-padding values, as Keras does: it keeps the output position (row and
column counters, advanced when a result moves) and, per channel, selects among
constant divisions, one per class of output row times class of output column
(a class is "inside", or one of the @top@ / @bottom@ (@left@ / @right@) rows
(columns) nearest the border that overlap padding: at most
@(top + bottom + 1) * (left + right + 1)@ dividers, equal ones shared by
synthesis). The classes and counts are computed at elaboration from the sizes.

= Timing, storage, protocol

Exactly those of 'K2C.Window.window' with @(kh, kw) = (ph, pw)@: the reduction
adds no register and no latency (the window output register feeds it), and
the ready is the window's registered ready. 'avgPoolSame' adds only the two
position counters (@Index hp@, @Index wp@), which change no timing: its
division stage is combinational and ready exactly when downstream is.

(@-fconstraint-solver-iterations=8@ above: GHC's default of 4 runs out while
the typelits plugins solve the 'KnownNat' of the wide sum type.)
-}
module K2C.Pool
  ( maxPool
  , avgPool
  , avgPoolSame
  , roundedQuotient
  , roundedQuotientBy
  , windowMax
  , windowAverage
  , reduceWindow
  ) where

import Clash.Prelude hiding (window)
import Data.Maybe (isJust)

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

-- | Average pooling with Keras 'same' padding on the /padded/ @hp x wp@ image
-- (put @"K2C.Pad".pad ... 0@ in front): each window is divided by its count of
-- non-padding values (module header).
avgPoolSame
  :: forall dom hp wp ph pw sh sw top bottom left right c i f
   . ( PoolSize dom hp wp ph pw sh sw c i f
     , KnownNat top, KnownNat bottom, KnownNat left, KnownNat right )
  => SNat hp -> SNat wp -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> SNat top -> SNat bottom -> SNat left -> SNat right
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
avgPoolSame hp wp ph pw sh sw top bottom left right =
  window hp wp ph pw sh sw |> averageByPosition hp wp top bottom left right rows cols
  where
    rows = Axis (snatToNum hp) (snatToNum ph) (snatToNum sh) (snatToNum top) (snatToNum bottom)
    cols = Axis (snatToNum wp) (snatToNum pw) (snatToNum sw) (snatToNum left) (snatToNum right)

-- | One padded axis: its length, window, stride and padding before and after.
data Axis = Axis { padded :: Int, kernel :: Int, stride :: Int, before :: Int, after :: Int }

-- | Windows along the axis.
outputs :: Axis -> Int
outputs a = (padded a - kernel a) `div` stride a + 1

-- | Non-padding values of window @k@ along the axis.
axisCount :: Axis -> Int -> Int
axisCount a k = min (start + kernel a) (padded a - after a) - max start (before a)
  where start = k * stride a

-- | Window @k@'s class: 0 if it overlaps no padding, @1 + k@ if it overlaps
-- the leading padding (@k < before@), @before + outputs - k@ if the trailing
-- (at most @after@ windows from the end).
axisClass :: Axis -> Int -> Int
axisClass a k
  | k >= outputs a                          = 0 -- past the last window: unused
  | k * stride a < before a                 = 1 + k
  | k * stride a + kernel a > padded a - after a = before a + outputs a - k
  | otherwise                               = 0

-- | The count of the windows of a class (the pool size for class 0).
classCount :: Axis -> Int -> Int
classCount a c
  | c == 0        = kernel a
  | c <= before a = countOf (c - 1)
  | otherwise     = countOf (outputs a - (c - before a))
  where countOf k = if k >= 0 && k < outputs a then max 1 (axisCount a k) else kernel a

-- | The division stage of 'avgPoolSame': per channel window sum, then the
-- rounded quotient by the count of the output position's row and column class.
averageByPosition
  :: forall dom hp wp ph pw top bottom left right c i f
   . ( HiddenClockResetEnable dom, KnownNat hp, KnownNat wp, KnownNat ph, KnownNat pw
     , KnownNat top, KnownNat bottom, KnownNat left, KnownNat right
     , KnownNat c, KnownNat i, KnownNat f, 1 <= ph, 1 <= pw )
  => SNat hp -> SNat wp -> SNat top -> SNat bottom -> SNat left -> SNat right -> Axis -> Axis
  -> Stream dom (Vec ph (Vec pw (Vec c (SFixed i f)))) (Vec c (SFixed i f))
averageByPosition SNat SNat SNat SNat SNat SNat rows cols (input, readyOut) = (output, readyOut)
  where
    position :: Signal dom (Index hp, Index wp)
    position = register (0, 0) (mux moved (advance <$> position) position)
    moved    = (isJust <$> input) .&&. readyOut
    lastRow  = toEnum (outputs rows - 1) :: Index hp
    lastCol  = toEnum (outputs cols - 1) :: Index wp
    advance (r, x)
      | x /= lastCol = (r, x + 1)
      | r /= lastRow = (r + 1, 0)
      | otherwise    = (0, 0)
    output   = (\p -> fmap (averageAt p)) <$> position <*> input

    rowClass :: Vec hp (Index (top + bottom + 1))
    rowClass = map (toEnum . axisClass rows . fromEnum) indicesI
    colClass :: Vec wp (Index (left + right + 1))
    colClass = map (toEnum . axisClass cols . fromEnum) indicesI
    rowCount = map (classCount rows . fromEnum) (indicesI @(top + bottom + 1))
    colCount = map (classCount cols . fromEnum) (indicesI @(left + right + 1))

    averageAt (r, x) = map (fromWide . divide (rowClass !! r) (colClass !! x))
                     . reduceWindow @ph @pw (+) . map (map (map toWide))
    divide a b s = (quotients !! a) !! b
      where quotients = map (\n -> map (\m -> roundedQuotientBy (n * m) s) colCount) rowCount
    toWide :: SFixed i f -> WideSum i f ph pw
    toWide = resize . unSF
    fromWide :: WideSum i f ph pw -> SFixed i f
    fromWide = sf (SNat @f) . resize @Signed @(i + f + CLog 2 ph + CLog 2 pw + 2) @(i + f)

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
roundedQuotient n = roundedQuotientBy (snatToNum n)

-- | 'roundedQuotient' by a count known at elaboration (a constant division).
roundedQuotientBy :: forall m . KnownNat m => Int -> Signed m -> Signed m
roundedQuotientBy count s
  | popCount divisor == 1 = shiftR numerator (countTrailingZeros divisor)
  | otherwise             = numerator `div` fromIntegral divisor
  where
    divisor   = 2 * count
    numerator = 2 * s + fromIntegral count
